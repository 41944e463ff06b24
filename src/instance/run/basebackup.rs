//! Base backups with pgBackRest, on request (`spec.backup.method: BaseBackup`): the
//! cluster's backup Job asks the primary's manager over HTTP (`POST /backup`, served on
//! the metrics port beside `/metrics`), and the manager runs `pgbackrest backup` next
//! to the data directory, which is the only place pgBackRest can read it from without
//! an SSH or TLS server of its own.
//!
//! The backup Job is still the cluster's unit of backup: the operator's machines create,
//! count and prune it exactly as they do a `pg_dump` Job, and its outcome is this
//! request's outcome. Nothing of the machines changes with the method.
//!
//! # Guarantees
//! - **At most one backup runs** in a pod: a request with another token while one runs
//!   is refused (`409`), and the Job asks again.
//! - **Idempotent per token** (the Job's name): a request for the token that runs or
//!   ran answers its state; a token this manager has not seen (it restarted) is first
//!   looked up in the repository, where every backup carries its token as the
//!   annotation [`TOKEN_ANNOTATION`], so a finished backup is never taken twice.
//! - **Only a writable primary backs up**: a standby refuses (`409`), so the Job never
//!   reports a backup that was not taken.
//! - Retention is pgBackRest's own `expire`, run by the backup that succeeded: it prunes
//!   the oldest full backups beyond the count (or age) and the WAL only they needed.
//! - Nothing here delays a round: the child runs on its own task, bounded by what the
//!   request asked (at most [`MAX_BOUND`]).
//!
//! # Assumptions
//! - The stanza exists (the archiver creates it, [`super::archive`]); before that a
//!   backup fails with pgBackRest's own message, and the Job reports it.
//! - Only the bearer of the cluster's endpoint token may ask ([`super::auth`]): a request
//!   names its own token and retention, so anyone else could take backups and, with a
//!   small retention, expire older ones. [`Endpoints`] refuses a write without it
//!   (`401`) before it reads the request; `/metrics` and `/healthz` stay open. An answer
//!   tells outcomes, never data.
//!
//! # Errors
//! Nothing here fails the manager. A backup that fails (or outlives its bound) answers
//! `failed` with pgBackRest's last line of output.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use tokio::task::JoinHandle;

use super::archive::{PGBACKREST, pgbackrest};
use super::auth::EndpointToken;
use crate::pod::backups::FIRST_RECOVERABLE_POINT;

/// The annotation each backup carries: the token (the Job's name) that asked for it.
pub const TOKEN_ANNOTATION: &str = "lockstep-token";
/// The longest a backup may run, whatever the request says.
pub const MAX_BOUND: Duration = Duration::from_secs(24 * 3600);
/// How long looking a token up in the repository may take.
const INFO_BOUND: Duration = Duration::from_secs(60);

/// How many full backups the repository keeps (pgBackRest's `repo1-retention-full`,
/// with the WAL they need).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retention {
    /// The newest this many.
    Count(u32),
    /// Those of the last this many days (and always the newest).
    Days(u32),
}

/// What one request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The token: the backup Job's name.
    pub token: String,
    /// How long the backup may run.
    pub bound: Duration,
    /// What to keep once it succeeded; none: everything.
    pub retention: Option<Retention>,
}

impl Request {
    /// The request in a query string `token=…[&timeout=S][&retention-count=N |
    /// &retention-days=N]`.
    ///
    /// # Errors
    /// Which parameter is missing or malformed.
    pub fn parse(query: &str) -> Result<Self, String> {
        let params: BTreeMap<&str, &str> = query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .collect();
        let token = params
            .get("token")
            .copied()
            .filter(|t| {
                !t.is_empty()
                    && t.len() <= 253
                    && t.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
            })
            .ok_or("token: a Job name (letters, digits, '-' and '.') is required")?;
        let number = |key: &str| -> Result<Option<u32>, String> {
            params
                .get(key)
                .map(|v| {
                    v.parse::<u32>()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or(format!("{key}: a positive whole number, not {v:?}"))
                })
                .transpose()
        };
        let bound = number("timeout")?
            .map_or(MAX_BOUND, |s| Duration::from_secs(u64::from(s)))
            .min(MAX_BOUND);
        let retention = match (number("retention-count")?, number("retention-days")?) {
            (Some(_), Some(_)) => {
                return Err("retention-count and retention-days: one at most".to_owned());
            }
            (Some(n), None) => Some(Retention::Count(n)),
            (None, Some(d)) => Some(Retention::Days(d)),
            (None, None) => None,
        };
        Ok(Self {
            token: token.to_owned(),
            bound,
            retention,
        })
    }

    /// `pgbackrest`'s arguments for this backup: a full, online backup that starts with
    /// an immediate checkpoint, carries the token, and expires by the retention.
    #[must_use]
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            "backup".to_owned(),
            "--type=full".to_owned(),
            "--start-fast".to_owned(),
            format!("--annotation={TOKEN_ANNOTATION}={}", self.token),
        ];
        match self.retention {
            Some(Retention::Count(n)) => args.extend([
                "--repo1-retention-full-type=count".to_owned(),
                format!("--repo1-retention-full={n}"),
            ]),
            Some(Retention::Days(d)) => args.extend([
                "--repo1-retention-full-type=time".to_owned(),
                format!("--repo1-retention-full={d}"),
            ]),
            None => {}
        }
        args
    }
}

/// The answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The backup runs.
    Running,
    /// It succeeded: what the repository holds now.
    Succeeded(String),
    /// It failed: pgBackRest's last line.
    Failed(String),
    /// Not taken: why (a standby, another backup running, a malformed request).
    Refused(String),
}

impl Answer {
    /// The HTTP status and the body's line: its first word is the answer's kind.
    #[must_use]
    pub fn http(&self) -> (u16, String) {
        match self {
            Self::Running => (202, "running\n".to_owned()),
            Self::Succeeded(detail) => (200, format!("succeeded {detail}\n")),
            Self::Failed(error) => (200, format!("failed {error}\n")),
            Self::Refused(why) => (409, format!("refused {why}\n")),
        }
    }
}

/// The backup this manager runs or ran last.
#[derive(Debug)]
struct Run {
    token: String,
    task: JoinHandle<Result<String, String>>,
    outcome: Option<Result<String, String>>,
}

#[derive(Debug)]
struct Inner {
    program: String,
    writable: bool,
    last: Option<Run>,
}

/// The manager's base backups. Cheap to clone (shared with the HTTP server).
#[derive(Debug, Clone)]
pub struct BaseBackups {
    inner: Arc<Mutex<Inner>>,
}

impl Default for BaseBackups {
    fn default() -> Self {
        Self::with_program(PGBACKREST)
    }
}

impl BaseBackups {
    /// Backups run by `program` (pgBackRest's command line) instead of `pgbackrest`.
    #[must_use]
    pub fn with_program(program: &str) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                program: program.to_owned(),
                writable: false,
                last: None,
            })),
        }
    }

    /// Record whether the server is a writable primary (each round).
    pub fn set_writable(&self, writable: bool) {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .writable = writable;
    }

    /// Answer `request`: start its backup, or say how it stands.
    pub fn request(&self, request: Request) -> Answer {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(run) = inner.last.as_mut() {
            if run.outcome.is_none()
                && let Some(joined) = (&mut run.task).now_or_never()
            {
                run.outcome =
                    Some(joined.unwrap_or_else(|e| Err(format!("the backup task failed: {e}"))));
            }
            match (&run.outcome, run.token == request.token) {
                (None, true) => return Answer::Running,
                (None, false) => {
                    return Answer::Refused(format!(
                        "the backup {} runs; one at a time",
                        run.token
                    ));
                }
                (Some(Ok(detail)), true) => return Answer::Succeeded(detail.clone()),
                (Some(Err(error)), true) => return Answer::Failed(error.clone()),
                (Some(_), false) => {}
            }
        }
        if !inner.writable {
            return Answer::Refused(
                "this instance is not a writable primary; base backups are taken on the primary"
                    .to_owned(),
            );
        }
        tracing::info!(token = %request.token, "base backup requested");
        inner.last = Some(Run {
            token: request.token.clone(),
            task: tokio::spawn(back_up(inner.program.clone(), request)),
            outcome: None,
        });
        Answer::Running
    }
}

/// What the manager's HTTP server serves: its metrics, and `POST /backup` when it
/// takes base backups.
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// `/metrics`.
    pub metrics: super::metrics::InstanceMetrics,
    /// `POST /backup`; none: answered 404 (to an authorised request).
    pub backups: Option<BaseBackups>,
    /// What every write (any method but `GET` and `HEAD`) must carry.
    pub token: EndpointToken,
}

impl crate::ops::health::Scrape for Endpoints {
    fn encode(&self) -> String {
        self.metrics.encode()
    }

    fn route(
        &self,
        method: &hyper::Method,
        path: &str,
        query: Option<&str>,
        headers: &hyper::HeaderMap,
    ) -> Option<(u16, String)> {
        let writes = method != hyper::Method::GET && method != hyper::Method::HEAD;
        if writes && let Err(refusal) = self.token.authorize(headers) {
            return Some(refusal.http());
        }
        if path != "/backup" {
            return None;
        }
        if method != hyper::Method::POST {
            return Some((405, "only POST\n".to_owned()));
        }
        let Some(backups) = &self.backups else {
            return Some((
                404,
                "this instance takes no base backups (spec.backup.walArchive is not set)\n"
                    .to_owned(),
            ));
        };
        Some(match Request::parse(query.unwrap_or_default()) {
            Ok(request) => backups.request(request).http(),
            Err(why) => Answer::Refused(why).http(),
        })
    }
}

/// The repository's backups, from `pgbackrest info --output=json`.
async fn info(program: &str) -> Result<serde_json::Value, String> {
    let args = ["info".to_owned(), "--output=json".to_owned()];
    let out = pgbackrest(program, &args, INFO_BOUND).await?;
    serde_json::from_str(&out).map_err(|e| format!("{PGBACKREST} info: not JSON: {e}"))
}

/// The backup the token took, if the repository holds one, and what it holds.
#[must_use]
pub fn summary(info: &serde_json::Value, token: &str) -> Option<String> {
    let backups = info.get(0)?.get("backup")?.as_array()?;
    let taken = backups.iter().find(|b| {
        b.get("annotation")
            .and_then(|a| a.get(TOKEN_ANNOTATION))
            .and_then(serde_json::Value::as_str)
            == Some(token)
    })?;
    let label = taken.get("label")?.as_str()?;
    let stop = |b: &serde_json::Value| {
        b.get("timestamp")
            .and_then(|t| t.get("stop"))
            .and_then(serde_json::Value::as_i64)
    };
    let when = |t: Option<i64>| {
        t.and_then(|s| chrono::DateTime::from_timestamp(s, 0))
            .map_or_else(|| "?".to_owned(), |t| t.to_rfc3339())
    };
    let first = backups.iter().filter_map(stop).min();
    Some(format!(
        "{label} (consistent at {}; the repository keeps {} backup(s), {FIRST_RECOVERABLE_POINT}{})",
        when(stop(taken)),
        backups.len(),
        when(first)
    ))
}

/// One backup: looked up first (a token already served is not taken twice), then taken.
async fn back_up(program: String, request: Request) -> Result<String, String> {
    if let Ok(info) = info(&program).await
        && let Some(done) = summary(&info, &request.token)
    {
        return Ok(done);
    }
    pgbackrest(&program, &request.args(), request.bound).await?;
    tracing::info!(token = %request.token, "base backup taken");
    let info = info(&program).await?;
    summary(&info, &request.token).ok_or_else(|| {
        format!(
            "{PGBACKREST} backup succeeded but its info shows no backup annotated {TOKEN_ANNOTATION}={}",
            request.token
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_names_its_token_bound_and_retention_and_nothing_malformed_passes() {
        let r = Request::parse("token=orders-backup-1&timeout=600&retention-count=3")
            .expect("a well-formed request");
        assert_eq!(r.token, "orders-backup-1");
        assert_eq!(r.bound, Duration::from_secs(600));
        assert_eq!(r.retention, Some(Retention::Count(3)));
        assert!(r.args().contains(&"--repo1-retention-full=3".to_owned()));
        assert!(
            r.args()
                .contains(&"--annotation=lockstep-token=orders-backup-1".to_owned())
        );
        let days = Request::parse("token=a&retention-days=7").expect("days");
        assert_eq!(days.retention, Some(Retention::Days(7)));
        assert!(
            days.args()
                .contains(&"--repo1-retention-full-type=time".to_owned())
        );
        assert_eq!(days.bound, MAX_BOUND);
        for bad in [
            "",
            "token=",
            "token=a;rm",
            "token=a&timeout=0",
            "token=a&retention-count=x",
            "token=a&retention-count=1&retention-days=1",
        ] {
            assert!(Request::parse(bad).is_err(), "{bad:?} passed");
        }
    }

    /// A stand-in for pgBackRest: `info` answers an empty repository, `backup` waits
    /// for the file `go` and then fails.
    fn stand_in(dir: &std::path::Path) -> String {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("pgbackrest");
        let go = dir.join("go");
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\ncase $1 in info) echo '[]';; backup) while [ ! -e {go} ]; do sleep 0.05; done; echo 'ERROR: [055]: no stanza' >&2; exit 55;; esac\n",
                go = go.display()
            ),
        )
        .expect("write the stand-in");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .expect("make it executable");
        path.display().to_string()
    }

    #[tokio::test]
    async fn a_standby_refuses_and_a_primary_runs_one_backup_at_a_time() {
        let dir = std::env::temp_dir().join(format!("lockstep-basebackup-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        let backups = BaseBackups::with_program(&stand_in(&dir));
        let ask = |token: &str| Request::parse(&format!("token={token}")).expect("request");
        assert!(
            matches!(backups.request(ask("a")), Answer::Refused(why) if why.contains("not a writable primary"))
        );
        backups.set_writable(true);
        assert_eq!(backups.request(ask("a")), Answer::Running);
        assert_eq!(
            backups.request(ask("a")),
            Answer::Running,
            "asked again: the same backup"
        );
        assert!(
            matches!(backups.request(ask("b")), Answer::Refused(why) if why.contains("the backup a runs"))
        );
        std::fs::write(dir.join("go"), "").expect("let it finish");
        // The stand-in ends as soon as it sees the file; asked until then, within a bound.
        let done = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                match backups.request(ask("a")) {
                    Answer::Running => tokio::time::sleep(Duration::from_millis(20)).await,
                    done => break done,
                }
            }
        })
        .await
        .expect("the backup ends within 30 s of being let go");
        assert_eq!(done, Answer::Failed("ERROR: [055]: no stanza".to_owned()));
        assert_eq!(
            done.http(),
            (200, "failed ERROR: [055]: no stanza\n".to_owned())
        );
        // Once it ended, another token starts another backup.
        assert_eq!(backups.request(ask("b")), Answer::Running);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `request` (one HTTP/1.1 request, `Connection: close`) to `addr`: the response.
    async fn send(addr: std::net::SocketAddr, request: String) -> String {
        use std::io::{Read, Write};
        tokio::task::spawn_blocking(move || {
            let mut stream = std::net::TcpStream::connect(addr).expect("connect");
            stream.write_all(request.as_bytes()).expect("write");
            let mut out = String::new();
            stream.read_to_string(&mut out).expect("read");
            out
        })
        .await
        .expect("join")
    }

    fn http(method: &str, path: &str, authorization: Option<&str>) -> String {
        let header = authorization.map_or_else(String::new, |a| format!("Authorization: {a}\r\n"));
        format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\n{header}Content-Length: 0\r\nConnection: close\r\n\r\n"
        )
    }

    #[tokio::test]
    async fn a_write_without_the_endpoint_token_is_refused_and_reads_stay_open() {
        let dir = std::env::temp_dir().join(format!("lockstep-endpoints-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        let file = dir.join("token");
        std::fs::write(&file, "the-token").expect("write the token");
        // A standby's manager: an authorised request reaches the backups, which refuse
        // it as they always did (`409`); nothing else would.
        let endpoints = Endpoints {
            metrics: super::super::metrics::InstanceMetrics::new(),
            backups: Some(BaseBackups::with_program(&stand_in(&dir))),
            token: EndpointToken::from_file(Some(file)),
        };
        let listener = crate::ops::health::bind("127.0.0.1:0".parse().expect("an address"))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let shutdown = tokio_util::sync::CancellationToken::new();
        let server = tokio::spawn(crate::ops::health::serve(
            listener,
            crate::ops::health::Status::new(false),
            endpoints,
            shutdown.clone(),
        ));
        let backup = "/backup?token=evil&retention-count=1";

        let none = send(addr, http("POST", backup, None)).await;
        assert!(none.starts_with("HTTP/1.1 401"), "{none}");
        assert!(
            none.to_ascii_lowercase()
                .contains("www-authenticate: bearer"),
            "{none}"
        );
        assert!(
            none.contains("unauthorized a write needs the header"),
            "{none}"
        );
        let wrong = send(addr, http("POST", backup, Some("Bearer the-tokem"))).await;
        assert!(wrong.starts_with("HTTP/1.1 401"), "{wrong}");
        assert!(
            !wrong.contains("the-token"),
            "a refusal names no token: {wrong}"
        );
        let other = send(addr, http("DELETE", "/metrics", None)).await;
        assert!(other.starts_with("HTTP/1.1 401"), "any write: {other}");

        let right = send(addr, http("POST", backup, Some("Bearer the-token"))).await;
        assert!(right.starts_with("HTTP/1.1 409"), "{right}");
        assert!(right.contains("not a writable primary"), "{right}");
        let authorised_other = send(addr, http("PUT", "/healthz", Some("Bearer the-token"))).await;
        assert!(
            authorised_other.starts_with("HTTP/1.1 405"),
            "{authorised_other}"
        );

        for open in ["/metrics", "/healthz"] {
            let read = send(addr, http("GET", open, None)).await;
            assert!(read.starts_with("HTTP/1.1 200"), "{open}: {read}");
        }
        shutdown.cancel();
        server.await.expect("join").expect("serve");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_summary_names_the_tokens_backup_and_the_first_recoverable_point() {
        let info = serde_json::json!([{"backup": [
            {"label": "20261203-070000F", "annotation": {"lockstep-token": "old"},
             "timestamp": {"start": 1_796_281_000, "stop": 1_796_281_200}},
            {"label": "20261203-080000F", "annotation": {"lockstep-token": "new"},
             "timestamp": {"start": 1_796_284_600, "stop": 1_796_284_800}}
        ]}]);
        let s = summary(&info, "new").expect("the token's backup");
        assert!(s.starts_with("20261203-080000F (consistent at "), "{s}");
        assert!(s.contains("keeps 2 backup(s)"), "{s}");
        assert!(s.contains("first recoverable point 2026-"), "{s}");
        assert_eq!(summary(&info, "absent"), None);
    }
}
