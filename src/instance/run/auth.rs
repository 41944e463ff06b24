//! Who may change something through the manager's endpoints: a request that is not a
//! `GET` or `HEAD` (today `POST /backup`, [`super::basebackup`]) must carry
//! `Authorization: Bearer <token>`, the cluster's endpoint token; `/metrics` and
//! `/healthz` stay open.
//!
//! The token is a file (`LOCKSTEP_ENDPOINT_TOKEN_FILE`, the Secret `<cluster>-endpoint-token`
//! mounted read-only with mode `0440`), not an environment variable: the manager's
//! environment is inherited by the postmaster and every process it starts (backends,
//! `archive_command`, pgBackRest), and would show in each one's `/proc/<pid>/environ`;
//! the file is read by the manager alone. It is read at each request (a few bytes), so
//! a Secret the kubelet fills in after the pod started (the volume is optional) is
//! honoured without a restart.
//!
//! # Guarantees
//! - **Fail closed**: without a token (the setting unset, the file missing, unreadable
//!   or empty) every write is refused; the reason is logged once, not per request.
//! - The comparison takes the same time whatever the bytes of a token of the right
//!   length (a fold over all of them); only the length can be learnt from timing, and
//!   every token the operator renders has the same one.
//! - A refusal names no part of the token.
//!
//! # Assumptions
//! - Whoever can read the pod's volumes (the `postgres` user, `kubectl exec`) may know
//!   the token: it guards the network port, not the pod.
//!
//! # Errors
//! None: a missing token is a refusal (`401`), not an error of the manager.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hyper::HeaderMap;
use hyper::header::AUTHORIZATION;

/// Why a write was refused (the body of the `401`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The request carries no `Authorization: Bearer …`.
    Missing,
    /// It carries a token that is not this manager's.
    Wrong,
    /// This manager has no token to compare with (fails closed).
    NotConfigured,
}

impl Refusal {
    /// The HTTP status (`401`) and the body's line: `unauthorized <why>`.
    #[must_use]
    pub fn http(self) -> (u16, String) {
        let why = match self {
            Self::Missing => {
                "a write needs the header Authorization: Bearer <the cluster's endpoint token>"
            }
            Self::Wrong => "the bearer token is not this cluster's endpoint token",
            Self::NotConfigured => {
                "this manager has no endpoint token (LOCKSTEP_ENDPOINT_TOKEN_FILE): every write is refused"
            }
        };
        (401, format!("unauthorized {why}\n"))
    }
}

/// The endpoint token: where the manager reads it. Cheap to clone.
#[derive(Debug, Clone)]
pub struct EndpointToken {
    file: Option<PathBuf>,
    /// Whether the missing token was logged already.
    told: Arc<AtomicBool>,
}

impl EndpointToken {
    /// The token in `file`; none: every write is refused (logged now, once).
    #[must_use]
    pub fn from_file(file: Option<PathBuf>) -> Self {
        let token = Self {
            file,
            told: Arc::new(AtomicBool::new(false)),
        };
        if token.file.is_none() {
            token.tell("LOCKSTEP_ENDPOINT_TOKEN_FILE is not set");
        }
        token
    }

    /// Log once why writes are refused.
    fn tell(&self, why: &str) {
        if !self.told.swap(true, Ordering::SeqCst) {
            tracing::warn!(
                why,
                "no endpoint token: every write to the manager's endpoints (POST /backup) is refused"
            );
        }
    }

    /// The token, read now: none if unset, unreadable or empty (told once).
    fn read(&self) -> Option<Vec<u8>> {
        let file = self.file.as_ref()?;
        match std::fs::read(file) {
            Ok(bytes) => {
                let token = bytes.trim_ascii().to_vec();
                if token.is_empty() {
                    self.tell(&format!("{} is empty", file.display()));
                    return None;
                }
                Some(token)
            }
            Err(e) => {
                self.tell(&format!("{} cannot be read: {e}", file.display()));
                None
            }
        }
    }

    /// Whether `headers` authorise a write.
    ///
    /// # Errors
    /// The [`Refusal`].
    pub fn authorize(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let Some(token) = self.read() else {
            return Err(Refusal::NotConfigured);
        };
        let offered = headers
            .get(AUTHORIZATION)
            .and_then(|v| bearer(v.as_bytes()))
            .ok_or(Refusal::Missing)?;
        if same(offered, &token) {
            Ok(())
        } else {
            Err(Refusal::Wrong)
        }
    }
}

/// The token of an `Authorization` value `Bearer <token>` (the scheme in any case).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, token) = value.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| token.trim_ascii())
        .filter(|t| !t.is_empty())
}

/// `a == b`, in a time that depends on their lengths only.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, value.parse().expect("a header value"));
        headers
    }

    fn token_file(name: &str, content: &str) -> PathBuf {
        let path =
            std::env::temp_dir().join(format!("lockstep-token-{}-{name}", std::process::id()));
        std::fs::write(&path, content).expect("write the token");
        path
    }

    #[test]
    fn only_the_bearer_of_the_files_token_is_authorised() {
        let path = token_file("right", "s3cret-token\n");
        let token = EndpointToken::from_file(Some(path.clone()));
        assert_eq!(token.authorize(&HeaderMap::new()), Err(Refusal::Missing));
        assert_eq!(
            token.authorize(&with("Basic s3cret-token")),
            Err(Refusal::Missing)
        );
        assert_eq!(
            token.authorize(&with("Bearer s3cret-tokeN")),
            Err(Refusal::Wrong)
        );
        assert_eq!(token.authorize(&with("Bearer s3cret")), Err(Refusal::Wrong));
        assert_eq!(token.authorize(&with("Bearer s3cret-token")), Ok(()));
        assert_eq!(token.authorize(&with("bearer s3cret-token")), Ok(()));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_manager_without_a_token_refuses_every_write() {
        let unset = EndpointToken::from_file(None);
        assert_eq!(
            unset.authorize(&with("Bearer anything")),
            Err(Refusal::NotConfigured)
        );
        let missing = EndpointToken::from_file(Some(PathBuf::from("/nonexistent/lockstep/token")));
        assert_eq!(
            missing.authorize(&with("Bearer anything")),
            Err(Refusal::NotConfigured)
        );
        let path = token_file("empty", "\n");
        let empty = EndpointToken::from_file(Some(path.clone()));
        assert_eq!(
            empty.authorize(&with("Bearer ")),
            Err(Refusal::NotConfigured)
        );
        let _ = std::fs::remove_file(&path);
        let (code, body) = Refusal::NotConfigured.http();
        assert_eq!(code, 401);
        assert!(body.starts_with("unauthorized "), "{body}");
    }

    #[test]
    fn the_comparison_needs_every_byte() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"xbc"));
        assert!(!same(b"abc", b"abcd"));
        assert!(!same(b"", b"a"));
    }
}
