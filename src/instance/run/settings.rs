//! A person's PostgreSQL settings in this instance (`spec.postgresql`, see
//! [`crate::pod::settings`]): read from the pod's annotations through the
//! downward API, written into the managed configuration, applied by a reload.
//!
//! This is not a state of the agent's machine: applying settings never changes what the
//! server is (primary or standby) or whether it may write, it is idempotent, and it may
//! happen at any round.
//!
//! # Guarantees
//! - The files never keep a value the running server refused: a parameter PostgreSQL
//!   reports invalid (`pg_file_settings.error`) keeps the last value it accepted (or
//!   none), and a `pg_hba.conf` rule it cannot parse (`pg_hba_file_rules.error`) is
//!   left out. The next start cannot fail on either.
//! - Before a start, the parameters are checked by PostgreSQL itself (`postgres -C`),
//!   and the ones it refuses are left out the same way.
//! - What is refused and what waits for a restart is logged once per change and
//!   served on `/metrics`.
//!
//! # Errors
//! A file that cannot be read or an annotation that does not parse leaves the settings
//! as they were, logged.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use crate::pod::applied::{SettingsReport, parameter_field, rule_field};
use crate::pod::settings::{
    InstanceSettings, PostgresqlSpec, SETTINGS_ANNOTATION, digest_of, parse,
};
use crate::pod::synchronous::{DataDurability, Waiting, standby_names};

use super::quote;

/// The comment that opens the person's parameters in `lockstep.conf`.
pub const PARAMETERS_SECTION: &str = "# spec.postgresql.parameters";

/// What this instance was asked for, and what its server made of it.
#[derive(Debug, Default)]
pub struct Settings {
    /// The downward-API annotations file.
    file: PathBuf,
    /// What the annotation says.
    wanted: InstanceSettings,
    /// `synchronous_standby_names` as last decided ([`Self::decide_synchronous`]).
    synchronous: String,
    /// The parameters the server refused (with its error), as last asked for.
    refused: BTreeMap<String, (String, String)>,
    /// The last value the server accepted for each parameter.
    accepted: BTreeMap<String, String>,
    /// The `pg_hba.conf` rules the server could not parse (with its error).
    refused_rules: BTreeMap<String, String>,
    /// What the files hold now (the annotation and `synchronous_standby_names`), if they
    /// were written from it.
    written: Option<(InstanceSettings, String)>,
    /// The parameters whose written value the running server applies only at a start.
    pending_restart: BTreeSet<String>,
    /// The digest of the settings that `pending_restart` is about (what the files held
    /// when the server last started or reloaded them): what the report says it judged.
    judged: Option<String>,
    /// Why the annotation was last unusable (logged once per reason).
    unusable: Option<String>,
}

impl Settings {
    /// Settings read from the annotations file `file` (`None`: no settings, as for a pod
    /// made before settings existed).
    #[must_use]
    pub fn new(file: Option<PathBuf>) -> Self {
        let mut settings = Settings {
            file: file.unwrap_or_default(),
            ..Settings::default()
        };
        settings.read();
        settings
    }

    /// Reads the annotation again; `true` when what it asks for changed.
    pub fn read(&mut self) -> bool {
        if self.file.as_os_str().is_empty() {
            return false;
        }
        let wanted = match std::fs::read_to_string(&self.file) {
            Ok(text) => match from_annotations(&text) {
                Ok(wanted) => wanted,
                Err(why) => {
                    if self.unusable.as_ref() != Some(&why) {
                        tracing::warn!(%why, "the settings annotation is not usable; keeping the settings as they are");
                        self.unusable = Some(why);
                    }
                    return false;
                }
            },
            // Not mounted (a pod from before settings): nothing asked for.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => InstanceSettings::default(),
            Err(e) => {
                tracing::warn!(file = %self.file.display(), error = %e, "reading the annotations failed");
                return false;
            }
        };
        self.unusable = None;
        if wanted == self.wanted {
            return false;
        }
        self.wanted = wanted;
        true
    }

    /// Whether the files should be written again: the annotation, or the decided
    /// `synchronous_standby_names`, changed since.
    #[must_use]
    pub fn stale(&self) -> bool {
        self.written
            .as_ref()
            .is_none_or(|(wanted, sync)| *wanted != self.wanted || *sync != self.synchronous)
    }

    /// Whether the value of `synchronous_standby_names` depends on which standbys
    /// stream (`dataDurability: Preferred`): a primary then reads them every round.
    #[must_use]
    pub fn follows_streaming(&self) -> bool {
        self.wanted
            .synchronous
            .as_ref()
            .is_some_and(|s| s.spec.data_durability == DataDurability::Preferred)
    }

    /// Decides `synchronous_standby_names` for the member `me`, a primary reading
    /// `streaming` (see [`standby_names`]); logs when it turns asynchronous or back.
    pub fn decide_synchronous(&mut self, me: &str, streaming: Option<&BTreeSet<String>>) {
        let value = self
            .wanted
            .synchronous
            .as_ref()
            .map(|s| standby_names(s, me, streaming))
            .unwrap_or_default();
        if value != self.synchronous && self.wanted.synchronous.is_some() {
            if value.is_empty() {
                tracing::warn!(streaming = ?streaming, "too few standbys stream for synchronous replication (dataDurability: Preferred): replicating asynchronously until they do");
            } else {
                tracing::info!(synchronous_standby_names = %value, "synchronous replication");
            }
        }
        self.synchronous = value;
    }

    /// How many standbys a commit waits for under the decided value (0: asynchronous).
    #[must_use]
    pub fn synchronous_number(&self) -> usize {
        self.synchronous
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// `synchronous_standby_names` as decided (empty: asynchronous).
    #[must_use]
    pub fn synchronous(&self) -> &str {
        &self.synchronous
    }

    /// What a primary says of synchronous replication: `None` when none is asked for
    /// (or the cluster has no other member), else what its commits wait for, given what
    /// the server runs (`running`: `synchronous_standby_names` and `synchronous_commit`
    /// as `SHOW` read them since the files were last written, if so).
    #[must_use]
    pub fn synchronous_report(&self, running: Option<(&str, &str)>) -> Option<Waiting> {
        let wanted = self.wanted.synchronous.as_ref()?;
        // Before the files are first written, what the server runs is not compared.
        let written = self.in_files();
        (wanted.members.len() > 1).then(|| {
            Waiting::of(
                wanted.spec.number,
                self.synchronous_degraded(),
                written.unwrap_or(&self.synchronous),
                running.filter(|_| written.is_some()),
            )
        })
    }

    /// `synchronous_standby_names` as the files hold it, once written.
    #[must_use]
    pub fn in_files(&self) -> Option<&str> {
        self.written.as_ref().map(|(_, sync)| sync.as_str())
    }

    /// Synchronous replication is asked for but turned asynchronous (too few standbys
    /// stream, `Preferred`).
    #[must_use]
    pub fn synchronous_degraded(&self) -> bool {
        self.wanted
            .synchronous
            .as_ref()
            .is_some_and(|s| s.members.len() > 1)
            && self.synchronous.is_empty()
    }

    /// What the annotation asks for, as last read.
    #[must_use]
    pub fn wanted(&self) -> &InstanceSettings {
        &self.wanted
    }

    /// What goes into the files: what is asked for, less what the server refused (a
    /// refused parameter keeps the last value it accepted, if any).
    #[must_use]
    pub fn effective(&self) -> PostgresqlSpec {
        let mut parameters = BTreeMap::new();
        for (name, value) in &self.wanted.postgresql.parameters {
            match self.refused.get(name) {
                Some((bad, _)) if bad == value => {
                    if let Some(good) = self.accepted.get(name) {
                        parameters.insert(name.clone(), good.clone());
                    }
                }
                _ => {
                    parameters.insert(name.clone(), value.clone());
                }
            }
        }
        PostgresqlSpec {
            parameters,
            pg_hba: self
                .wanted
                .postgresql
                .pg_hba
                .iter()
                .filter(|r| !self.refused_rules.contains_key(*r))
                .cloned()
                .collect(),
        }
    }

    /// The files now hold [`Self::effective`].
    pub fn written(&mut self) {
        self.written = Some((self.wanted.clone(), self.synchronous.clone()));
    }

    /// The files hold what is asked for (so what is refused and pending is known).
    #[must_use]
    pub fn is_written(&self) -> bool {
        self.written.is_some()
    }

    /// The files must be written again (what they hold was refused).
    pub fn unwritten(&mut self) {
        self.written = None;
    }

    /// The server refused `name` = `value` with `error`: it is left out of the files
    /// from now on (until the annotation asks for another value). `true` if it is new.
    pub fn refuse(&mut self, name: &str, error: &str) -> bool {
        let Some(value) = self.wanted.postgresql.parameters.get(name) else {
            return false;
        };
        let new = self.refused.get(name).map(|(v, _)| v) != Some(value);
        if new {
            tracing::warn!(parameter = name, value = %value, %error, kept = ?self.accepted.get(name), "PostgreSQL refused a parameter: its last accepted value is kept");
        }
        self.refused
            .insert(name.to_owned(), (value.clone(), error.to_owned()));
        new
    }

    /// The server could not parse the `pg_hba.conf` rule `rule`: it is left out.
    /// `true` if it is new.
    pub fn refuse_rule(&mut self, rule: &str, error: &str) -> bool {
        let new = !self.refused_rules.contains_key(rule);
        if new {
            tracing::warn!(%rule, %error, "PostgreSQL refused a pg_hba.conf rule: it is left out");
        }
        self.refused_rules.insert(rule.to_owned(), error.to_owned());
        new
    }

    /// The server accepted every written parameter that it did not refuse.
    pub fn accepted(&mut self) {
        let effective = self.effective();
        self.refused
            .retain(|name, (value, _)| self.wanted.postgresql.parameters.get(name) == Some(value));
        self.refused_rules
            .retain(|rule, _| self.wanted.postgresql.pg_hba.contains(rule));
        for (name, value) in effective.parameters {
            self.accepted.insert(name, value);
        }
    }

    /// The parameters the running server applies only at its next start, read after
    /// it reloaded the files: the report now judges what they hold.
    pub fn set_pending_restart(&mut self, names: BTreeSet<String>) {
        if names != self.pending_restart && !names.is_empty() {
            tracing::info!(parameters = ?names, "settings changed that PostgreSQL applies only at a restart: pending until this instance's next start");
        }
        self.pending_restart = names;
        self.judge_written();
    }

    /// The server started on the files: nothing waits for a restart, and the report
    /// judges what they hold.
    pub fn started(&mut self) {
        self.pending_restart.clear();
        self.judge_written();
    }

    fn judge_written(&mut self) {
        if let Some((wanted, _)) = &self.written {
            self.judged = Some(digest_of(wanted));
        }
    }

    /// What this instance tells the operator (the pod condition of
    /// [`crate::pod::applied`]): each refused value by the field that
    /// holds it, and the parameters pending a restart.
    #[must_use]
    pub fn report(&self) -> SettingsReport {
        let rules = &self.wanted.postgresql.pg_hba;
        let wanted = &self.wanted.postgresql.parameters;
        let mut refused: Vec<String> = self
            .refused
            .iter()
            .filter(|(name, (value, _))| wanted.get(*name) == Some(value))
            .map(|(name, _)| parameter_field(name))
            .collect();
        refused.extend(
            rules
                .iter()
                .enumerate()
                .filter(|(_, r)| self.refused_rules.contains_key(*r))
                .map(|(i, _)| rule_field(i)),
        );
        SettingsReport {
            refused,
            pending_restart: self.pending_restart.iter().cloned().collect(),
            judged: self.judged.clone(),
        }
    }

    /// How many parameters and rules are refused now.
    #[must_use]
    pub fn refused_count(&self) -> usize {
        self.refused.len() + self.refused_rules.len()
    }

    /// How many parameters wait for a restart.
    #[must_use]
    pub fn pending_restart_count(&self) -> usize {
        self.pending_restart.len()
    }

    /// Remembers, as accepted, the person's parameters that `lockstep.conf` (as this
    /// manager's predecessor on the volume left it) holds: the files never keep a value
    /// the server refused, so a value asked for now and refused keeps the one it ran
    /// with before this start, not PostgreSQL's default.
    pub fn remember_accepted(&mut self, lockstep_conf: &str) {
        let section = lockstep_conf
            .lines()
            .skip_while(|l| *l != PARAMETERS_SECTION)
            .skip(1)
            .take_while(|l| !l.starts_with('#'));
        for line in section {
            let Some((name, quoted)) = line.split_once(" = ") else {
                continue;
            };
            if let Some(value) = quote::conf_unquote(quoted) {
                self.accepted.entry(name.to_owned()).or_insert(value);
            }
        }
    }

    /// The parameters of [`Self::effective`] as `postgresql.conf` lines.
    #[must_use]
    pub fn parameter_lines(spec: &PostgresqlSpec) -> Vec<String> {
        spec.parameters
            .iter()
            .filter(|(_, value)| !value.contains('\n'))
            .map(|(name, value)| format!("{name} = {}", quote::conf(value)))
            .collect()
    }
}

/// `spec.postgresql` as the annotations file (`key="value"` per line, values
/// Go-quoted) carries it: empty when the annotation is absent.
///
/// # Errors
/// The annotation's value is not a quoted string, or not the spec's JSON.
pub fn from_annotations(text: &str) -> Result<InstanceSettings, String> {
    let Some(quoted) = text.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key == SETTINGS_ANNOTATION).then_some(value.trim())
    }) else {
        return Ok(InstanceSettings::default());
    };
    let value =
        quote::go_unquote(quoted).ok_or_else(|| format!("{SETTINGS_ANNOTATION} is not quoted"))?;
    parse(&value).map_err(|e| format!("{SETTINGS_ANNOTATION}: {e}"))
}

/// The parameter names PostgreSQL's messages name (`parameter "work_mem"`), in order.
#[must_use]
pub fn named_parameters(messages: &str) -> Vec<String> {
    messages
        .split("parameter \"")
        .skip(1)
        .filter_map(|rest| rest.split_once('"').map(|(name, _)| name.to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(parameters: &[(&str, &str)], rules: &[&str]) -> PostgresqlSpec {
        PostgresqlSpec {
            parameters: parameters
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            pg_hba: rules.iter().map(|r| (*r).to_owned()).collect(),
        }
    }

    fn settings_asking(spec: &PostgresqlSpec) -> Settings {
        Settings {
            wanted: InstanceSettings {
                postgresql: spec.clone(),
                ..InstanceSettings::default()
            },
            ..Settings::default()
        }
    }

    #[test]
    fn the_annotations_file_gives_the_spec_and_nothing_when_the_annotation_is_absent() {
        let text = "lockstep.dev/other=\"x\"\nlockstep.dev/postgresql=\"{\\\"parameters\\\":{\\\"work_mem\\\":\\\"16MB\\\"}}\"\n";
        assert_eq!(
            from_annotations(text).map(|s| s.postgresql),
            Ok(asked(&[("work_mem", "16MB")], &[]))
        );
        assert_eq!(
            from_annotations("lockstep.dev/other=\"x\"\n"),
            Ok(InstanceSettings::default())
        );
        assert!(from_annotations("lockstep.dev/postgresql=\"not json\"\n").is_err());
    }

    #[test]
    fn a_refused_value_keeps_the_last_accepted_one_until_another_is_asked_for() {
        let mut s = settings_asking(&asked(&[("work_mem", "16MB")], &[]));
        s.accepted();
        s.wanted.postgresql = asked(&[("work_mem", "banana"), ("geqo", "off")], &[]);
        assert!(s.refuse("work_mem", "invalid value"));
        assert!(!s.refuse("work_mem", "invalid value"), "said once");
        assert_eq!(
            s.effective(),
            asked(&[("work_mem", "16MB"), ("geqo", "off")], &[])
        );
        s.accepted();
        assert_eq!(s.refused_count(), 1);
        s.wanted.postgresql = asked(&[("work_mem", "32MB")], &[]);
        assert_eq!(s.effective(), asked(&[("work_mem", "32MB")], &[]));
        s.accepted();
        assert_eq!(s.refused_count(), 0);
    }

    #[test]
    fn a_refused_value_never_accepted_before_is_left_out() {
        let mut s = settings_asking(&asked(&[("work_mem", "banana")], &[]));
        s.refuse("work_mem", "invalid value");
        assert_eq!(s.effective(), PostgresqlSpec::default());
    }

    #[test]
    fn a_refused_rule_is_left_out_and_the_others_kept_in_order() {
        let mut s = settings_asking(&asked(
            &[],
            &["host all a 10.0.0.0/8 md5", "nonsense", "local all b trust"],
        ));
        s.refuse_rule("nonsense", "invalid connection type");
        assert_eq!(
            s.effective().pg_hba,
            ["host all a 10.0.0.0/8 md5", "local all b trust"]
        );
    }

    #[test]
    fn the_report_names_each_refused_value_by_its_field_and_what_waits_for_a_restart() {
        let mut s = settings_asking(&asked(
            &[("work_mem", "banana"), ("geqo", "off")],
            &["host all a 10.0.0.0/8 md5", "nonsense"],
        ));
        s.refuse("work_mem", "invalid value");
        s.refuse_rule("nonsense", "invalid connection type");
        s.set_pending_restart(["shared_buffers".to_owned()].into());
        assert_eq!(
            s.report(),
            SettingsReport {
                refused: vec![
                    "spec.postgresql.parameters.work_mem".to_owned(),
                    "spec.postgresql.pgHba[1]".to_owned()
                ],
                pending_restart: vec!["shared_buffers".to_owned()],
                judged: None,
            }
        );
        // Asked for another value: no longer refused, even before the next check.
        s.wanted.postgresql = asked(&[("work_mem", "16MB")], &[]);
        s.set_pending_restart(BTreeSet::new());
        assert!(s.report().applied());
    }

    #[test]
    fn a_report_judges_new_settings_only_once_the_server_reloaded_or_started_on_them() {
        let first = asked(&[("shared_buffers", "64MB")], &[]);
        let mut s = settings_asking(&first);
        s.written();
        s.started();
        let judged_first = Some(digest_of(&s.wanted));
        assert_eq!(s.report().judged, judged_first);
        // New settings written and reloaded: until the server says what waits for a
        // start, the report still judges the first ones.
        s.wanted.postgresql = asked(&[("shared_buffers", "128MB")], &[]);
        s.written();
        assert_eq!(s.report().judged, judged_first);
        s.set_pending_restart(["shared_buffers".to_owned()].into());
        let report = s.report();
        assert_eq!(report.judged, Some(digest_of(&s.wanted)));
        assert_ne!(report.judged, judged_first);
        assert_eq!(report.pending_restart, ["shared_buffers"]);
    }

    #[test]
    fn a_value_refused_after_a_restart_keeps_the_one_the_file_on_the_volume_held() {
        let before = asked(
            &[("work_mem", "16MB"), ("search_path", "'$user', public")],
            &[],
        );
        let mut file = vec![
            "# Managed by lockstep instance".to_owned(),
            PARAMETERS_SECTION.to_owned(),
        ];
        file.extend(Settings::parameter_lines(&before));
        file.extend(["# managed by Lockstep".to_owned(), "port = 5432".to_owned()]);
        let mut s = settings_asking(&asked(
            &[("work_mem", "banana"), ("search_path", "'$user', public")],
            &[],
        ));
        s.remember_accepted(&file.join("\n"));
        s.refuse("work_mem", "invalid value");
        assert_eq!(s.effective(), before);
    }

    #[test]
    fn parameters_are_written_quoted() {
        assert_eq!(
            Settings::parameter_lines(&asked(&[("search_path", "'$user', public")], &[])),
            ["search_path = '''$user'', public'"]
        );
    }

    #[test]
    fn the_parameters_postgresql_names_are_found_in_its_messages() {
        let err = "LOG:  invalid value for parameter \"work_mem\": \"banana\"\nFATAL:  configuration file \"/d/lockstep.conf\" contains errors\nLOG: parameter \"geqo\" requires a Boolean value";
        assert_eq!(named_parameters(err), ["work_mem", "geqo"]);
    }
}
