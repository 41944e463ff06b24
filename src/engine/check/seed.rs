//! Where a model check's seed and case count come from: the configuration, or the
//! environment (`LOCKSTEP_CHECK_SEED`, `LOCKSTEP_CHECK_CASES`), and how a seed is written
//! back so that a failure names the run that reproduces it.
//!
//! # Guarantees
//! - [`hex`] of a seed, given back as `LOCKSTEP_CHECK_SEED`, is that seed exactly
//!   ([`parse`] takes 64 hex digits as the seed's 32 bytes).
//! - A decimal `u64` gives the seed it gave before hexadecimal seeds were accepted, so
//!   seeds written down as numbers still reproduce.
//! - An empty value is no value (a `make` run without git passes an empty seed): the
//!   configuration's seed stands.
//!
//! # Errors
//! [`parse`] refuses anything else, so a mistyped seed is never silently the fixed one.

/// The variable that names the generator's seed.
pub const SEED_VAR: &str = "LOCKSTEP_CHECK_SEED";
/// The variable that names the number of generated sequences.
pub const CASES_VAR: &str = "LOCKSTEP_CHECK_CASES";

/// The seed `value` names, laid over `base`; `None` when `value` is empty.
///
/// - decimal digits that fit a `u64`: its eight bytes, repeated and mixed with their
///   index (the meaning the variable always had);
/// - otherwise an even number of hex digits, 2 to 64 (a git commit's 40, a seed's 64):
///   those bytes over the start of `base`, the rest of `base` kept.
///
/// # Errors
/// The value is neither.
pub fn parse(value: &str, base: [u8; 32]) -> Result<Option<[u8; 32]>, String> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(None);
    }
    if value.bytes().all(|b| b.is_ascii_digit())
        && let Ok(n) = value.parse::<u64>()
    {
        let mut seed = [0u8; 32];
        for (i, byte) in seed.iter_mut().enumerate() {
            // The index fits a byte: the seed has 32.
            *byte = n.to_le_bytes()[i % 8] ^ u8::try_from(i).unwrap_or(u8::MAX);
        }
        return Ok(Some(seed));
    }
    let digits = value.as_bytes();
    if !digits.len().is_multiple_of(2)
        || digits.len() > 64
        || !digits.iter().all(u8::is_ascii_hexdigit)
    {
        return Err(format!(
            "{SEED_VAR}={value:?} is neither a decimal u64 nor 2 to 64 hex digits (an even count)"
        ));
    }
    let mut seed = base;
    for (byte, pair) in seed.iter_mut().zip(digits.chunks(2)) {
        let pair = std::str::from_utf8(pair).map_err(|e| e.to_string())?;
        *byte = u8::from_str_radix(pair, 16).map_err(|e| e.to_string())?;
    }
    Ok(Some(seed))
}

/// The case count `value` names; `None` when it is empty.
///
/// # Errors
/// The value is not a count.
pub fn parse_cases(value: &str) -> Result<Option<u32>, String> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(None);
    }
    value
        .parse()
        .map(Some)
        .map_err(|_| format!("{CASES_VAR}={value:?} is not a count of cases"))
}

/// The seed as 64 hex digits: what [`parse`] reads back as this very seed.
#[must_use]
pub fn hex(seed: &[u8; 32]) -> String {
    seed.iter().map(|b| format!("{b:02x}")).collect()
}

/// How to run `cases` sequences from `seed` again, as a shell would say it.
#[must_use]
pub fn reproduce(seed: &[u8; 32], cases: u32) -> String {
    format!("{SEED_VAR}={} {CASES_VAR}={cases}", hex(seed))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: [u8; 32] = *b"lockstep/engine/check: seed 0001";

    #[test]
    fn a_seed_written_as_hex_reads_back_as_itself() {
        let seed = parse("0123456789", BASE).unwrap().unwrap();
        assert_eq!(parse(&hex(&seed), BASE).unwrap(), Some(seed));
        assert_eq!(parse(&hex(&BASE), [0; 32]).unwrap(), Some(BASE));
    }

    #[test]
    fn a_commit_hash_names_a_seed_of_its_own() {
        let a = parse("7a9d568f00e1c2b3a4958d7e6f5a4b3c2d1e0f9a", BASE)
            .unwrap()
            .unwrap();
        let b = parse("4d2addf000e1c2b3a4958d7e6f5a4b3c2d1e0f9a", BASE)
            .unwrap()
            .unwrap();
        assert_ne!(a, b);
        assert_ne!(a, BASE);
        assert_eq!(a[..4], [0x7a, 0x9d, 0x56, 0x8f]);
        assert_eq!(a[20..], BASE[20..], "the base fills what the hash does not");
    }

    #[test]
    fn a_decimal_seed_keeps_the_meaning_it_had() {
        let seed = parse("7", BASE).unwrap().unwrap();
        assert_eq!(seed[0], 7);
        assert_eq!(seed[1], 1);
        assert_eq!(seed[8], 7 ^ 8);
    }

    #[test]
    fn an_empty_value_leaves_the_configured_seed_and_a_mistyped_one_is_refused() {
        assert_eq!(parse("", BASE).unwrap(), None);
        assert_eq!(parse("  ", BASE).unwrap(), None);
        assert!(parse("HEAD", BASE).is_err());
        assert!(parse("abc", BASE).is_err(), "an odd number of digits");
        assert!(parse(&"a".repeat(66), BASE).is_err());
        assert_eq!(parse_cases("").unwrap(), None);
        assert_eq!(parse_cases("20000").unwrap(), Some(20_000));
        assert!(parse_cases("many").is_err());
    }

    #[test]
    fn a_failure_names_the_variables_that_rerun_it() {
        assert_eq!(
            reproduce(&[0xab; 32], 512),
            format!(
                "LOCKSTEP_CHECK_SEED={} LOCKSTEP_CHECK_CASES=512",
                "ab".repeat(32)
            )
        );
    }
}
