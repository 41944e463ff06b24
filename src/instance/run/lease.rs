//! The primary Lease through kube-rs: read it, renew it, release it; every write is a
//! replace preconditioned on the `resourceVersion` that was read, and every request is
//! bounded.
//!
//! # Guarantees
//! - [`LeaseClient::renew`] writes only a Lease that names this holder, with
//!   `renewTime` = now and `leaseDurationSeconds` = the `L` this manager's fence runs
//!   with (the operator then knows the longest `L` a living holder may use).
//!   It returns the moment its *read* started: the fence counts `T` from there.
//! - [`LeaseClient::release`] clears the holder and writes the annotations
//!   `lockstep.dev/released-by` (`<pod>/<uid>`) and, when given, `lockstep.dev/released-lsn`;
//!   it does so only while the Lease still names this holder, and never erases nor
//!   lowers a released position already there ([`released`]).
//! - A write loses to any write made since the read (HTTP 409, [`LeaseError::Conflict`]).
//! - Each request returns within [`LeaseClient::request_bound`].
//!
//! # Errors
//! [`LeaseError`].

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::PostParams;

use super::clock::Moment;
use crate::instance::observe::{Lsn, released_position};
use crate::pod::lease::{INITIALIZED, RELEASED_BY, RELEASED_LSN};

/// What went wrong with the Lease.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The request did not finish within the bound.
    #[error("{0} of the Lease did not finish within {1:?}")]
    Timeout(&'static str, Duration),
    /// The Lease does not exist.
    #[error("the Lease {0} does not exist")]
    NotFound(String),
    /// Someone wrote the Lease since it was read (HTTP 409).
    #[error("the Lease changed since it was read (conflict)")]
    Conflict,
    /// The Lease names another holder, or none: this manager may not write it.
    #[error("the Lease names {holder:?}, not this pod")]
    NotHolder {
        /// Whom it names.
        holder: Option<String>,
    },
    /// The API server refused or could not be reached.
    #[error("the API server: {0}")]
    Api(#[source] kube::Error),
}

/// The Lease as last read.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// The Lease itself (what a write starts from).
    pub lease: Lease,
    /// When the read started.
    pub read_at: Moment,
}

impl Seen {
    /// `spec.holderIdentity`, if not empty.
    #[must_use]
    pub fn holder(&self) -> Option<&str> {
        self.lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            .filter(|h| !h.is_empty())
    }

    /// The annotation `lockstep.dev/released-lsn`: the last WAL position of the
    /// primary that stopped cleanly before, which the next primary must have received.
    #[must_use]
    pub fn released_lsn(&self) -> Option<&str> {
        self.lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(RELEASED_LSN))
            .map(String::as_str)
    }
}

/// The Lease's text of a renewal by `me` at `now` with `L` = `lease_seconds`; with
/// `moved_past_released_lsn`, the `released-lsn` annotation is dropped (this server
/// is writable past it); with `mark_initialized`, the `initialized` annotation is added
/// if missing (this pod has the cluster's data).
///
/// # Errors
/// [`LeaseError::NotHolder`] when the Lease does not name `me`.
pub fn renewed(
    lease: &Lease,
    me: &str,
    lease_seconds: i32,
    now: k8s_openapi::jiff::Timestamp,
    moved_past_released_lsn: bool,
    mark_initialized: bool,
) -> Result<Lease, LeaseError> {
    let mut lease = lease.clone();
    let spec = lease.spec.get_or_insert_with(Default::default);
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    if holder.as_deref() != Some(me) {
        return Err(LeaseError::NotHolder { holder });
    }
    spec.renew_time = Some(MicroTime(now));
    spec.lease_duration_seconds = Some(lease_seconds);
    if moved_past_released_lsn && let Some(annotations) = &mut lease.metadata.annotations {
        annotations.remove(RELEASED_LSN);
    }
    if mark_initialized {
        lease
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .entry(INITIALIZED.to_owned())
            .or_insert_with(|| "true".to_owned());
    }
    Ok(lease)
}

/// The Lease's text of a release by `me`, with the last WAL position `lsn` if known.
///
/// A release never erases nor lowers the position already on the Lease
/// (`lockstep.dev/released-lsn`): that position is what the next primary must have
/// received (a primary that stopped cleanly before wrote it), and it stays until a
/// writable holder that moved past it renews ([`renewed`]), a person removes it, or the
/// operator waives it. So a holder that was never writable past it (named, then fenced,
/// demoted or crashed before its first writable renewal) releases keeping it: without a
/// position of its own, the one there stands; with a lower one (which a holder that
/// promoted only once it had received that position cannot have), the higher stands
/// ([`released_position`], which the model's Lease uses too). A position there that
/// does not parse is replaced by the one given.
///
/// # Errors
/// [`LeaseError::NotHolder`] when the Lease does not name `me`.
pub fn released(lease: &Lease, me: &str, lsn: Option<&str>) -> Result<Lease, LeaseError> {
    let mut lease = lease.clone();
    let spec = lease.spec.get_or_insert_with(Default::default);
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    if holder.as_deref() != Some(me) {
        return Err(LeaseError::NotHolder { holder });
    }
    spec.holder_identity = None;
    let annotations = lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(RELEASED_BY.to_owned(), me.to_owned());
    let there = annotations
        .get(RELEASED_LSN)
        .and_then(|text| text.parse::<Lsn>().ok());
    let given = lsn.and_then(|text| text.parse::<Lsn>().ok());
    if let Some(lsn) = lsn
        && given.is_some()
        && released_position(there, given) == given
    {
        annotations.insert(RELEASED_LSN.to_owned(), lsn.to_owned());
    }
    Ok(lease)
}

/// The primary Lease, as this pod sees and writes it.
#[derive(Clone)]
pub struct LeaseClient {
    api: Api<Lease>,
    name: String,
    me: String,
    lease_seconds: i32,
    request_bound: Duration,
}

impl std::fmt::Debug for LeaseClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseClient")
            .field("name", &self.name)
            .field("me", &self.me)
            .field("lease_seconds", &self.lease_seconds)
            .finish_non_exhaustive()
    }
}

impl LeaseClient {
    /// The Lease `name` in `namespace`, written by `me` (`<pod>/<uid>`) with `L` =
    /// `lease_seconds`, each request bounded by `request_bound`.
    #[must_use]
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        me: &str,
        lease_seconds: i32,
        request_bound: Duration,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            me: me.to_owned(),
            lease_seconds,
            request_bound,
        }
    }

    /// This holder's identity.
    #[must_use]
    pub fn me(&self) -> &str {
        &self.me
    }

    /// The bound of one request.
    #[must_use]
    pub fn request_bound(&self) -> Duration {
        self.request_bound
    }

    /// Reads the Lease.
    ///
    /// # Errors
    /// [`LeaseError::Timeout`], [`LeaseError::NotFound`], [`LeaseError::Api`].
    pub async fn read(&self) -> Result<Seen, LeaseError> {
        let read_at = Moment::now();
        let lease = tokio::time::timeout(self.request_bound, self.api.get_opt(&self.name))
            .await
            .map_err(|_| LeaseError::Timeout("the read", self.request_bound))?
            .map_err(LeaseError::Api)?
            .ok_or_else(|| LeaseError::NotFound(self.name.clone()))?;
        Ok(Seen { lease, read_at })
    }

    async fn replace(&self, lease: &Lease) -> Result<Lease, LeaseError> {
        tokio::time::timeout(
            self.request_bound,
            self.api.replace(&self.name, &PostParams::default(), lease),
        )
        .await
        .map_err(|_| LeaseError::Timeout("the write", self.request_bound))?
        .map_err(|e| match e {
            kube::Error::Api(status) if status.code == 409 => LeaseError::Conflict,
            e => LeaseError::Api(e),
        })
    }

    /// Reads the Lease and renews it (see the module's guarantees). Returns the Lease as
    /// written and the moment the read started.
    ///
    /// # Errors
    /// [`LeaseError`]; [`LeaseError::NotHolder`] when it names someone else or nobody.
    pub async fn renew(
        &self,
        moved_past_released_lsn: bool,
        mark_initialized: bool,
    ) -> Result<Seen, LeaseError> {
        let seen = self.read().await?;
        let lease = renewed(
            &seen.lease,
            &self.me,
            self.lease_seconds,
            k8s_openapi::jiff::Timestamp::now(),
            moved_past_released_lsn,
            mark_initialized,
        )?;
        let lease = self.replace(&lease).await?;
        Ok(Seen {
            lease,
            read_at: seen.read_at,
        })
    }

    /// Reads the Lease and releases it if it still names this holder (with the last WAL
    /// position `lsn`). Returns whether it did: `false` when it names someone else.
    ///
    /// # Errors
    /// [`LeaseError`] other than [`LeaseError::NotHolder`].
    pub async fn release(&self, lsn: Option<&str>) -> Result<bool, LeaseError> {
        let seen = self.read().await?;
        match released(&seen.lease, &self.me, lsn) {
            Ok(lease) => self.replace(&lease).await.map(|_| true),
            Err(LeaseError::NotHolder { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use kube::api::ObjectMeta;

    const ME: &str = "pg-0/uid-0";

    fn lease(holder: Option<&str>, released_lsn: Option<&str>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("pg-primary".to_owned()),
                resource_version: Some("42".to_owned()),
                annotations: released_lsn
                    .map(|lsn| [(RELEASED_LSN.to_owned(), lsn.to_owned())].into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                lease_duration_seconds: Some(120),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn a_renewal_writes_now_and_the_l_this_holder_runs_with_on_the_version_it_read() {
        let now = k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap();
        let out = renewed(
            &lease(Some(ME), Some("0/3000060")),
            ME,
            15,
            now,
            false,
            false,
        )
        .unwrap();
        let spec = out.spec.unwrap();
        assert_eq!(spec.renew_time, Some(MicroTime(now)));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(out.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(
            out.metadata
                .annotations
                .unwrap()
                .get(RELEASED_LSN)
                .map(String::as_str),
            Some("0/3000060"),
            "kept while the server has not moved past it"
        );
    }

    #[test]
    fn a_renewal_by_a_writable_server_drops_the_released_lsn() {
        let now = k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap();
        let out = renewed(
            &lease(Some(ME), Some("0/3000060")),
            ME,
            15,
            now,
            true,
            false,
        )
        .unwrap();
        assert!(!out.metadata.annotations.unwrap().contains_key(RELEASED_LSN));
    }

    #[test]
    fn a_renewal_with_data_marks_the_cluster_initialized_and_never_unmarks_it() {
        let now = k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap();
        let marked = renewed(&lease(Some(ME), None), ME, 15, now, false, true).unwrap();
        let value = |l: &Lease| {
            l.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(INITIALIZED).cloned())
        };
        assert_eq!(value(&marked).as_deref(), Some("true"));
        let before_a_bootstrap = renewed(&marked, ME, 15, now, false, false).unwrap();
        assert_eq!(value(&before_a_bootstrap).as_deref(), Some("true"));
        let unmarked = renewed(&lease(Some(ME), None), ME, 15, now, false, false).unwrap();
        assert_eq!(value(&unmarked), None);
    }

    #[test]
    fn nobody_renews_or_releases_a_lease_that_names_someone_else_or_nobody() {
        let now = k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap();
        for holder in [Some("pg-1/uid-1"), Some(""), None] {
            assert!(matches!(
                renewed(&lease(holder, None), ME, 15, now, false, true),
                Err(LeaseError::NotHolder { .. })
            ));
            assert!(matches!(
                released(&lease(holder, None), ME, None),
                Err(LeaseError::NotHolder { .. })
            ));
        }
    }

    #[test]
    fn a_release_without_a_position_keeps_the_position_already_on_the_lease() {
        let out = released(&lease(Some(ME), Some("0/3000060")), ME, None).unwrap();
        assert_eq!(out.spec.unwrap().holder_identity, None);
        let annotations = out.metadata.annotations.unwrap();
        assert_eq!(annotations.get(RELEASED_BY).map(String::as_str), Some(ME));
        assert_eq!(
            annotations.get(RELEASED_LSN).map(String::as_str),
            Some("0/3000060"),
            "the next primary must still have received it"
        );
        let none = released(&lease(Some(ME), None), ME, None).unwrap();
        assert!(
            !none
                .metadata
                .annotations
                .unwrap()
                .contains_key(RELEASED_LSN)
        );
    }

    #[test]
    fn a_release_never_lowers_the_position_on_the_lease_and_raises_it() {
        let position = |there: Option<&str>, given: &str| {
            released(&lease(Some(ME), there), ME, Some(given))
                .unwrap()
                .metadata
                .annotations
                .unwrap()
                .get(RELEASED_LSN)
                .cloned()
        };
        // Compared as positions, not as text ("0/A000000" > "0/9FFFFFF").
        assert_eq!(
            position(Some("0/A000000"), "0/9FFFFFF").as_deref(),
            Some("0/A000000")
        );
        assert_eq!(
            position(Some("0/9FFFFFF"), "0/A000000").as_deref(),
            Some("0/A000000")
        );
        assert_eq!(position(Some("1/0"), "0/FFFFFFFF").as_deref(), Some("1/0"));
        assert_eq!(
            position(Some("not a position"), "0/5").as_deref(),
            Some("0/5")
        );
        assert_eq!(position(Some("0/5"), "garbage").as_deref(), Some("0/5"));
    }

    #[test]
    fn a_release_clears_the_holder_and_says_who_released_it_at_which_lsn() {
        let out = released(&lease(Some(ME), None), ME, Some("0/5000028")).unwrap();
        assert_eq!(out.spec.unwrap().holder_identity, None);
        let annotations = out.metadata.annotations.unwrap();
        assert_eq!(annotations.get(RELEASED_BY).map(String::as_str), Some(ME));
        assert_eq!(
            annotations.get(RELEASED_LSN).map(String::as_str),
            Some("0/5000028")
        );
        assert_eq!(out.metadata.resource_version.as_deref(), Some("42"));
    }
}
