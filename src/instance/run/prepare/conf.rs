//! The managed configuration: `lockstep.conf`, `pg_hba.conf`, `standby.signal`, and
//! what the server refused of the user's parameters.

#[allow(clippy::wildcard_imports)] // the preparation's vocabulary, imported once in its parent
use super::*;
use crate::instance::run::clock::Moment;
use crate::pod::synchronous::managed_commit;

/// The parameter that makes a commit wait for the synchronous standbys.
const SYNCHRONOUS_COMMIT: &str = "synchronous_commit";

/// Whether `key` is what a restore (pgBackRest's `restore`) writes into
/// `postgresql.auto.conf` for the recovery that follows, which needs it until it ends:
/// `restore_command` and the recovery target. The bootstrap removes it then
/// ([`Prepare::drop_from_auto_conf`]), and nothing else does before.
pub(super) fn restore_setting(key: &str) -> bool {
    key == "restore_command" || key.starts_with("recovery_target")
}

/// The parameter a line of a configuration file sets, in lower case.
pub(super) fn setting_of(line: &str) -> String {
    line.trim_start()
        .split(|c: char| c == '=' || c.is_whitespace())
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase()
}

/// Whether a line of `postgresql.auto.conf` sets a parameter Lockstep manages
/// ([`MANAGED`](crate::pod::settings::MANAGED), `allow_alter_system`
/// included, and `synchronous_commit`), but what a restore wrote for its recovery.
fn overrides_managed(line: &str) -> bool {
    let key = setting_of(line);
    (crate::pod::settings::MANAGED.contains(&key.as_str()) && !restore_setting(&key))
        || key == SYNCHRONOUS_COMMIT
}

impl Prepare {
    /// Removes from `postgresql.auto.conf` every line that sets a parameter `drop` names
    /// (without `ALTER SYSTEM`, which PostgreSQL 17 refuses once Lockstep wrote
    /// `allow_alter_system = off`).
    ///
    /// # Errors
    /// [`PrepareError::Io`] when the file cannot be written.
    pub(super) fn drop_from_auto_conf(
        &self,
        drop: impl Fn(&str) -> bool,
    ) -> Result<(), PrepareError> {
        let auto = self.layout.pgdata.join("postgresql.auto.conf");
        let Ok(text) = fs::read_to_string(&auto) else {
            return Ok(());
        };
        let kept: String = text
            .lines()
            .filter(|line| !drop(line))
            .map(|line| format!("{line}\n"))
            .collect();
        write_private(&auto, &kept)
    }

    /// The major of the server the data directory belongs to (its `PG_VERSION`), if
    /// there is one yet.
    fn major(&self) -> Option<u32> {
        fs::read_to_string(self.layout.pgdata.join("PG_VERSION"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// `lockstep.conf` for a primary or a standby: the person's parameters (`user`)
    /// first, then the managed settings, which win over any of the same name (read
    /// later).
    #[must_use]
    pub fn lockstep_conf(&self, standby: bool, user: &PostgresqlSpec, synchronous: &str) -> String {
        let a = &self.args;
        let mut lines = vec![
            "# Managed by lockstep instance; rewritten on every start. Do not edit.".to_owned(),
            // Lockstep's defaults, before the person's parameters, which may override them.
            // A standby whose primary went away (a failover, a switchover) tries its
            // new one every second, not every 5 s: under synchronous replication the
            // new primary's first commit waits for it.
            "wal_retrieve_retry_interval = '1s'".to_owned(),
        ];
        if !user.parameters.is_empty() {
            lines.push(super::super::settings::PARAMETERS_SECTION.to_owned());
            lines.extend(Settings::parameter_lines(user));
            lines.push("# managed by Lockstep".to_owned());
        }
        lines.extend([
            format!("listen_addresses = {}", quote::conf(&a.listen_addresses)),
            format!("port = {}", a.port),
            format!(
                "unix_socket_directories = {}",
                quote::conf(&a.socket_dir.display().to_string())
            ),
            "wal_level = replica".to_owned(),
            format!("max_wal_senders = {}", a.max_wal_senders),
            format!("max_replication_slots = {}", a.max_wal_senders),
            format!("wal_keep_size = {}", quote::conf(&a.wal_keep_size)),
            "hot_standby = on".to_owned(),
            "wal_log_hints = on".to_owned(),
            "password_encryption = 'scram-sha-256'".to_owned(),
            "recovery_target_timeline = 'latest'".to_owned(),
            // spec.synchronous (empty: asynchronous), the same on every member.
            format!("synchronous_standby_names = {}", quote::conf(synchronous)),
        ]);
        // Standbys named: commits wait for them, whatever the person's parameters say.
        if !synchronous.is_empty()
            && let Some(level) =
                managed_commit(user.parameters.get(SYNCHRONOUS_COMMIT).map(String::as_str))
        {
            lines.push(format!("{SYNCHRONOUS_COMMIT} = {}", quote::conf(level)));
        }
        // PostgreSQL 17 and later: `ALTER SYSTEM` is refused, so nothing it writes can
        // override a managed setting at the next reload.
        if self.major().is_some_and(|m| m >= 17) {
            lines.push("allow_alter_system = off".to_owned());
        }
        let transport = self.transport();
        lines.extend(transport.conf_lines());
        if standby && let Some(host) = &self.streams_from() {
            let conninfo = format!(
                "host={} port={} user={} {} application_name={} connect_timeout=10",
                quote::conninfo(host),
                a.primary_port,
                quote::conninfo(&a.replication_user),
                transport.replication_conninfo(&a.replication_password),
                quote::conninfo(&self.application_name()),
            );
            lines.push(format!("primary_conninfo = {}", quote::conf(&conninfo)));
        }
        if a.wal_archive.is_some() {
            lines.extend(super::super::archive::conf_lines());
        }
        if let Some(extra) = &a.extra_conf {
            lines.push("# POSTGRES_EXTRA_CONF".to_owned());
            lines.push(extra.clone());
        }
        lines.join("\n") + "\n"
    }

    /// The name this server streams under (`application_name`): the pod's by default.
    #[must_use]
    pub fn application_name(&self) -> String {
        self.args
            .application_name
            .clone()
            .or_else(|| self.args.pod_name.clone())
            .unwrap_or_else(|| "lockstep-replica".to_owned())
    }

    /// Writes the managed configuration for a primary or a standby, with the person's
    /// settings `user`, and gives `$PGDATA` the mode PostgreSQL requires (`0700`): the
    /// kubelet applies a pod's `fsGroup` to a volume by adding group `rwx` and setgid to
    /// everything on it when it mounts it, and PostgreSQL refuses to start on a data
    /// directory open to its group for writing (as CloudNativePG's instance manager,
    /// this one sets the mode back before every start).
    ///
    /// # Errors
    /// [`PrepareError::Io`].
    pub fn write_config(
        &self,
        standby: bool,
        user: &PostgresqlSpec,
        synchronous: &str,
    ) -> Result<(), PrepareError> {
        let dir = &self.layout.pgdata;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(io("chmod 0700", dir))?;
        write_private(
            &dir.join("lockstep.conf"),
            &self.lockstep_conf(standby, user, synchronous),
        )?;
        let conf = dir.join("postgresql.conf");
        let text = fs::read_to_string(&conf).map_err(io("reading", &conf))?;
        if !text.contains("\ninclude_if_exists = 'lockstep.conf'") {
            let mut file = fs::OpenOptions::new()
                .append(true)
                .open(&conf)
                .map_err(io("opening", &conf))?;
            file.write_all(b"\n# lockstep managed settings\ninclude_if_exists = 'lockstep.conf'\n")
                .map_err(io("writing", &conf))?;
        }
        // Read after every other file, `postgresql.auto.conf` (`ALTER SYSTEM`'s, and
        // `pg_basebackup`'s conninfo) would override a managed setting: none is kept.
        self.drop_from_auto_conf(overrides_managed)?;
        let transport = self.transport();
        if transport == Transport::Plain
            && let Some(tls) = &self.args.tls_dir
        {
            tracing::warn!(dir = %tls.display(), "no certificates: serving without TLS, the replication role by password (a cluster created before its operator issued certificates)");
        }
        if let (Transport::Tls { server, .. }, Some(own)) = (&transport, &self.args.server_tls_dir)
            && server != own
        {
            tracing::warn!(dir = %own.display(), "spec.certificates names a Secret without tls.crt, tls.key and ca.crt (or none at all): serving the cluster's own certificate");
        }
        write_private(
            &dir.join("pg_hba.conf"),
            &pg_hba(user, &transport, &self.args.replication_user),
        )?;
        let signal = dir.join("standby.signal");
        if standby {
            write_private(&signal, "")?;
        } else {
            for name in ["standby.signal", "recovery.signal"] {
                let path = dir.join(name);
                if path.exists() {
                    fs::remove_file(&path).map_err(io("removing", &path))?;
                }
            }
        }
        Ok(())
    }

    /// Checks the parameters in the files with PostgreSQL itself (`postgres -C`, which
    /// reads the configuration as a start would, without starting): the names of the
    /// parameters it refuses, empty when it accepts them all.
    ///
    /// # Errors
    /// [`PrepareError::Spawn`] when `postgres` cannot run; [`PrepareError::Tool`] when
    /// it outlasts `START_TIMEOUT_SECONDS`, or runs until `by` (the manager's renewal
    /// deadline while its server may write: the check is tried again next round).
    pub async fn refused_parameters(
        &self,
        by: Option<Moment>,
    ) -> Result<Vec<(String, String)>, PrepareError> {
        let tool = "postgres -C";
        let bound = by.map_or(self.start_timeout(), |by| {
            self.start_timeout().min(by.since(Moment::now()))
        });
        let run = Command::new(self.args.binary("postgres"))
            .arg("-D")
            .arg(&self.layout.pgdata)
            .args(["-C", "port"])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let output = bounded(tool, bound, run).await?;
        if output.status.success() {
            return Ok(Vec::new());
        }
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        Ok(super::super::settings::named_parameters(&stderr)
            .into_iter()
            .map(|name| {
                let quoted = format!("\"{name}\"");
                let line = stderr
                    .lines()
                    .find(|l| l.contains(&quoted))
                    .unwrap_or_default();
                (name, line.trim().to_owned())
            })
            .collect())
    }
}

/// `pg_hba.conf`: local access and replication first (no rule of a person's can lock
/// the manager or the standbys out), then the person's rules, then password access
/// for everyone else. Over TLS ([`Transport::Tls`]) every remote rule of Lockstep's is
/// `hostssl`, and the replication role is authenticated by its certificate.
#[must_use]
pub fn pg_hba(user: &PostgresqlSpec, transport: &Transport, replication_user: &str) -> String {
    let mut text = String::from(
        "# Managed by lockstep instance; rewritten on every start and settings change.\n\
         # TYPE  DATABASE     USER  ADDRESS  METHOD\n\
         local   all          all            trust\n\
         local   replication  all            trust\n",
    );
    text.push_str(&transport.replication_rules(replication_user));
    if !user.pg_hba.is_empty() {
        text.push_str("# spec.postgresql.pgHba\n");
        for rule in user.pg_hba.iter().filter(|r| !r.contains('\n')) {
            text.push_str(rule);
            text.push('\n');
        }
    }
    text.push_str(&format!(
        "{} all          all   all      scram-sha-256\n",
        transport.remote()
    ));
    text
}
