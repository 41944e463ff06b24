//! The model's run-once Jobs: created once per key (the API server's AlreadyExists), and
//! finished by the environment with what the real Job's pod would report.

use super::World;

/// What a Job does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum JobKind {
    /// A scheduled or on-demand backup.
    Backup,
    /// The final backup before deletion.
    Final,
}

/// A Job of the model, by its deterministic key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Job {
    pub(super) key: String,
    pub(super) uid: u64,
    pub(super) kind: JobKind,
    /// `None` while running; `Some(succeeded)` once finished.
    pub(super) done: Option<bool>,
    /// It carries the outcome finalizer (every Job the operator creates does).
    pub(super) held: bool,
    /// Someone deleted it while it was held: it stays until the finalizer goes.
    pub(super) deleting: bool,
}

impl World {
    /// Creates Job `key` unless one of that name exists (the API server's
    /// AlreadyExists); whether it did.
    pub(super) fn create_job(&mut self, key: &str, kind: JobKind) -> bool {
        if self.jobs.iter().any(|j| j.key == key) {
            return false;
        }
        let uid = self.new_uid();
        self.jobs.push(Job {
            key: key.to_owned(),
            uid,
            kind,
            done: None,
            held: true,
            deleting: false,
        });
        true
    }

    /// The Job `uid` is deleted: it goes at once unless the outcome finalizer holds it.
    pub(super) fn delete_job(&mut self, uid: &str) {
        for j in self.jobs.iter_mut().filter(|j| j.uid.to_string() == uid) {
            j.deleting = true;
        }
        self.jobs.retain(|j| j.held || !j.deleting);
    }

    /// The operator removes the outcome finalizer of the Job `uid`.
    pub(super) fn release_job(&mut self, uid: &str) {
        for j in self.jobs.iter_mut().filter(|j| j.uid.to_string() == uid) {
            j.held = false;
        }
        self.jobs.retain(|j| j.held || !j.deleting);
    }

    pub(super) fn finish(&mut self, index: usize, ok: bool) {
        let Some(job) = self.jobs.get(index).cloned() else {
            return;
        };
        let succeeded = match job.kind {
            JobKind::Backup => ok,
            JobKind::Final => {
                self.final_backup_succeeded |= ok;
                ok
            }
        };
        if let Some(j) = self.jobs.get_mut(index) {
            j.done = Some(succeeded);
        }
    }
}
