//! The `lockstep` command: run the operators, or generate their CRDs and tables.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use lockstep::machines::{Generated, crd_files, machine_files};

/// Lockstep: Kubernetes operators whose lifecycles are declared state machines.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write every kind's CustomResourceDefinition into a directory.
    Crds(GenerateArgs),
    /// Write every machine's transition table (YAML) and statechart (Markdown).
    Machines(GenerateArgs),
}

#[derive(Debug, clap::Args)]
struct GenerateArgs {
    /// Where to write.
    #[arg(long, default_value = ".")]
    out_dir: PathBuf,
    /// Write nothing; fail if any file on disk differs from what would be written.
    #[arg(long)]
    check: bool,
}

fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crds(args) => generate(&args, crd_files()?),
        Command::Machines(args) => generate(&args, machine_files()?),
    }
}

/// Write `files` under `args.out_dir`, or with `--check` report the stale ones.
fn generate(args: &GenerateArgs, files: Vec<Generated>) -> anyhow::Result<ExitCode> {
    let mut stale = Vec::new();
    for file in &files {
        let path = args.out_dir.join(&file.file);
        if args.check {
            if std::fs::read_to_string(&path).ok().as_deref() != Some(file.content.as_str()) {
                stale.push(path);
            }
        } else {
            write(&path, &file.content)?;
        }
    }
    if stale.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    for path in &stale {
        eprintln!("stale: {} (regenerate with `make generate`)", path.display());
    }
    Ok(ExitCode::FAILURE)
}

fn write(path: &Path, content: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, content).with_context(|| format!("writing {}", path.display()))
}
