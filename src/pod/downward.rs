//! The downward API's files, as the kubelet writes them: how a pod's manager reads the
//! labels and annotations the operator puts on its pod.

/// The value of a downward-API file's `key="value"` line, which the kubelet writes with
/// Go's `%q`: `\"`, `\\`, `\n` and the other escapes of a Go string literal (`\xHH`,
/// `\uHHHH`, `\UHHHHHHHH`, octal `\NNN`). `None` if it is not such a literal.
#[must_use]
pub fn go_unquote(quoted: &str) -> Option<String> {
    let inner = quoted.strip_prefix('"')?.strip_suffix('"')?;
    let mut out: Vec<u8> = Vec::with_capacity(inner.len());
    let mut chars = inner.chars();
    let hex = |chars: &mut std::str::Chars<'_>, n: usize| -> Option<u32> {
        let digits: String = chars.by_ref().take(n).collect();
        (digits.len() == n).then_some(())?;
        u32::from_str_radix(&digits, 16).ok()
    };
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut buf = [0; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        let simple = |b: u8| Some(vec![b]);
        let bytes = match chars.next()? {
            'a' => simple(0x07),
            'b' => simple(0x08),
            'f' => simple(0x0c),
            'n' => simple(b'\n'),
            'r' => simple(b'\r'),
            't' => simple(b'\t'),
            'v' => simple(0x0b),
            '\\' => simple(b'\\'),
            '"' => simple(b'"'),
            '\'' => simple(b'\''),
            'x' => simple(u8::try_from(hex(&mut chars, 2)?).ok()?),
            'u' => Some(
                char::from_u32(hex(&mut chars, 4)?)?
                    .to_string()
                    .into_bytes(),
            ),
            'U' => Some(
                char::from_u32(hex(&mut chars, 8)?)?
                    .to_string()
                    .into_bytes(),
            ),
            d @ '0'..='7' => {
                let rest: String = chars.by_ref().take(2).collect();
                simple(u8::from_str_radix(&format!("{d}{rest}"), 8).ok()?)
            }
            _ => None,
        }?;
        out.extend_from_slice(&bytes);
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_go_quoted_value_comes_back_as_it_was() {
        assert_eq!(
            go_unquote(r#""{\"work_mem\":\"16MB\"}\n\tx\\y\u00e9\x41\101""#).as_deref(),
            Some("{\"work_mem\":\"16MB\"}\n\tx\\yéAA")
        );
        assert_eq!(go_unquote("\"plain é\"").as_deref(), Some("plain é"));
        assert_eq!(go_unquote("unquoted"), None);
        assert_eq!(go_unquote(r#""dangling\""#), None);
    }
}
