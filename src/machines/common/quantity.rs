//! Kubernetes quantities (`10Gi`, `500m`, `1e3`), parsed exactly so that two spellings
//! of one amount compare equal (`0.5` and `500m`, `1Gi` and `1024Mi`).
//!
//! The API server canonicalizes quantities it stores, so a drift check that compared the
//! strings would see a change that is not one and apply forever.

use std::cmp::Ordering;

/// A parsed quantity, in billionths of the unit (rounded up, as Kubernetes does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Quantity(i128);

impl Quantity {
    /// Parse a quantity; `None` if it is not one (or is too large to represent exactly).
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let (negative, rest) = match text.as_bytes().first()? {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_len);
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && frac.is_empty() || frac.contains('.') {
            return None;
        }
        let (mut dec_exp, bin_exp) = exponents(suffix)?;
        let mut mantissa: i128 = 0;
        for d in whole.bytes().chain(frac.bytes()) {
            mantissa = mantissa
                .checked_mul(10)?
                .checked_add(i128::from(d - b'0'))?;
        }
        dec_exp = dec_exp.checked_add(9)?.checked_sub(frac.len() as i32)?;
        let mut value = if dec_exp >= 0 {
            mantissa.checked_mul(10i128.checked_pow(dec_exp as u32)?)?
        } else {
            let divisor = 10i128.checked_pow(dec_exp.unsigned_abs())?;
            // Round up to a whole billionth, as the API server does.
            (mantissa + divisor - 1) / divisor
        };
        value = value.checked_mul(1i128.checked_shl(bin_exp)?)?;
        Some(Quantity(if negative { -value } else { value }))
    }
}

/// The decimal suffixes, from nano (10^-9) to exa (10^18), each 10^3 times the one before.
const DECIMAL: [&str; 10] = ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"];
/// The binary suffixes, from kibi (2^10) to exbi (2^60), each 2^10 times the one before.
const BINARY: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

/// The powers of ten and of two a suffix stands for (`e3` and `E3` are 10^3, `E` alone
/// is exa); `None` if it is not a suffix.
fn exponents(suffix: &str) -> Option<(i32, u32)> {
    if let Some(i) = DECIMAL.iter().position(|s| *s == suffix) {
        return Some((3 * i as i32 - 9, 0));
    }
    if let Some(i) = BINARY.iter().position(|s| *s == suffix) {
        return Some((0, 10 * (i as u32 + 1)));
    }
    Some((suffix.strip_prefix(['e', 'E'])?.parse().ok()?, 0))
}

/// Compare two quantities; `None` if either is not one.
pub fn compare(a: &str, b: &str) -> Option<Ordering> {
    Some(Quantity::parse(a)?.cmp(&Quantity::parse(b)?))
}

/// Whether two strings are the same quantity (or, failing that, the same string).
pub fn same(a: &str, b: &str) -> bool {
    a == b || compare(a, b) == Some(Ordering::Equal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_one_amount_are_equal() {
        assert!(same("0.5", "500m"));
        assert!(same("1Gi", "1024Mi"));
        assert!(same("1e3", "1k"));
        assert!(same("1.5Gi", "1536Mi"));
        assert!(!same("1G", "1Gi"));
    }

    #[test]
    fn each_suffix_is_a_thousand_or_1024_times_the_one_before() {
        for pair in DECIMAL.windows(2) {
            assert!(
                same(&format!("1000{}", pair[0]), &format!("1{}", pair[1])),
                "{pair:?}"
            );
        }
        assert!(same("1n", "0.000000001") && same("1E", "1e18") && same("1E", "1000P"));
        assert!(same("1Ki", "1024"));
        for pair in BINARY.windows(2) {
            assert!(
                same(&format!("1024{}", pair[0]), &format!("1{}", pair[1])),
                "{pair:?}"
            );
        }
        assert_eq!(
            Quantity::parse("1Ei"),
            Quantity::parse("1152921504606846976")
        );
    }

    #[test]
    fn quantities_order_by_amount() {
        assert_eq!(compare("2Gi", "10Gi"), Some(Ordering::Less));
        assert_eq!(compare("10Gi", "10000Mi"), Some(Ordering::Greater));
    }

    #[test]
    fn nonsense_is_not_a_quantity() {
        for bad in ["", "Gi", "1.2.3", "10GB", "ten", "1e", "-"] {
            assert_eq!(Quantity::parse(bad), None, "{bad}");
        }
    }
}
