//! Quoting for the four languages the manager writes values into: SQL, libpq conninfo,
//! `postgresql.conf` and `pg_hba.conf`. Values (passwords above all) may hold quotes, backslashes and
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

/// A `pg_hba.conf` name: `"…"`, so that it is never read as a keyword (`all`) or a
/// group (`+name`); a double quote, which the file cannot hold, is dropped.
#[must_use]
pub fn hba(value: &str) -> String {
    format!("\"{}\"", value.replace('"', ""))
}

/// The string [`conf`] quoted: `None` if `quoted` is not one.
#[must_use]
pub fn conf_unquote(quoted: &str) -> Option<String> {
    let inner = quoted.strip_prefix('\'')?.strip_suffix('\'')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '\'' if chars.next()? == '\'' => out.push('\''),
            '\'' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

pub use crate::pod::downward::go_unquote;

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn a_conf_quoted_value_comes_back_as_it_was(value in ".*") {
            proptest::prop_assert_eq!(conf_unquote(&conf(&value)), Some(value));
        }
    }

    #[test]
    fn a_conf_value_with_a_lone_quote_is_not_one() {
        assert_eq!(conf_unquote("'it's'"), None);
    }

    const NASTY: &str = "s3cr'et\\ \"pw";

    #[test]
    fn each_language_escapes_its_own_quotes_and_backslashes() {
        assert_eq!(sql_literal(NASTY), "'s3cr''et\\ \"pw'");
        assert_eq!(sql_ident(NASTY), "\"s3cr'et\\ \"\"pw\"");
        assert_eq!(conninfo(NASTY), "'s3cr\\'et\\\\ \"pw'");
        assert_eq!(conf(NASTY), "'s3cr''et\\\\ \"pw'");
    }
}
