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
        let (mut dec_exp, bin_exp): (i32, u32) = match suffix {
            "" => (0, 0),
            "Ki" => (0, 10),
            "Mi" => (0, 20),
            "Gi" => (0, 30),
            "Ti" => (0, 40),
            "Pi" => (0, 50),
            "Ei" => (0, 60),
            "n" => (-9, 0),
            "u" => (-6, 0),
            "m" => (-3, 0),
            "k" => (3, 0),
            "M" => (6, 0),
            "G" => (9, 0),
            "T" => (12, 0),
            "P" => (15, 0),
            "E" => (18, 0),
            s if s.starts_with(['e', 'E']) => (s[1..].parse::<i32>().ok()?, 0),
            _ => return None,
        };
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
