//! A WAL location as the operator and the pods write it.

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A WAL location (`pg_lsn`), written `X/Y` in hexadecimal as PostgreSQL prints it.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(into = "String", try_from = "String")]
#[schemars(with = "String")]
pub struct Lsn(pub u64);

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

/// A string that is not an LSN (`X/Y`, each 1 to 8 hexadecimal digits).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an LSN (X/Y in hexadecimal)")]
pub struct NotAnLsn(pub String);

impl FromStr for Lsn {
    type Err = NotAnLsn;

    fn from_str(s: &str) -> Result<Self, NotAnLsn> {
        let bad = || NotAnLsn(s.to_owned());
        let (hi, lo) = s.split_once('/').ok_or_else(bad)?;
        let part = |p: &str| {
            if p.is_empty() || p.len() > 8 {
                return Err(bad());
            }
            u64::from_str_radix(p, 16).map_err(|_| bad())
        };
        Ok(Lsn((part(hi)? << 32) | part(lo)?))
    }
}

impl From<Lsn> for String {
    fn from(l: Lsn) -> String {
        l.to_string()
    }
}

impl TryFrom<String> for Lsn {
    type Error = NotAnLsn;

    fn try_from(s: String) -> Result<Self, NotAnLsn> {
        s.parse()
    }
}
