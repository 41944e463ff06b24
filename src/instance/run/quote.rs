//! Quoting for the three languages the manager writes values into: SQL, libpq conninfo
//! and `postgresql.conf`. Values (passwords above all) may hold quotes, backslashes and
//! spaces.

/// A SQL string literal: `'…'` with single quotes doubled.
#[must_use]
pub fn sql_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// A SQL identifier: `"…"` with double quotes doubled.
#[must_use]
pub fn sql_ident(value: &str) -> String {
    format!("\"{}\"", value.replace('"', "\"\""))
}

/// A libpq conninfo value: `'…'` with backslashes and single quotes backslash-escaped.
#[must_use]
pub fn conninfo(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// A `postgresql.conf` string: `'…'` with backslashes escaped and single quotes doubled.
#[must_use]
pub fn conf(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NASTY: &str = "s3cr'et\\ \"pw";

    #[test]
    fn each_language_escapes_its_own_quotes_and_backslashes() {
        assert_eq!(sql_literal(NASTY), "'s3cr''et\\ \"pw'");
        assert_eq!(sql_ident(NASTY), "\"s3cr'et\\ \"\"pw\"");
        assert_eq!(conninfo(NASTY), "'s3cr\\'et\\\\ \"pw'");
        assert_eq!(conf(NASTY), "'s3cr''et\\\\ \"pw'");
    }
}
