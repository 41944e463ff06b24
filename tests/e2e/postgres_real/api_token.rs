//! The instance manager's API token on real pods: projected, short-lived, mounted where
//! its client reads it.

use super::*;

/// The bytes of base64url text (JWT segments: no padding), or of base64 (a Secret's
/// data: its padding is skipped).
pub(super) fn base64url(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'-' | b'+' => Some(62),
        b'_' | b'/' => Some(63),
        _ => None,
    };
    let sextets: Vec<u8> = text.bytes().filter_map(value).collect();
    sextets
        .chunks(4)
        .flat_map(|chunk| {
            let bits = chunk
                .iter()
                .enumerate()
                .fold(0u32, |acc, (i, s)| acc | (u32::from(*s) << (18 - 6 * i)));
            let bytes = bits.to_be_bytes();
            bytes[1..chunk.len()].to_vec()
        })
        .collect()
}

/// The token `pod`'s manager reads expires 600 s after it was issued and names the pod
/// it is bound to.
pub(super) fn the_manager_reads_a_ten_minute_token_bound_to_its_pod(real: &Real, pod: &str) {
    let (ok, token) = real.kubectl(&[
        "exec",
        pod,
        "-c",
        "postgres",
        "--",
        "cat",
        "/var/run/secrets/kubernetes.io/serviceaccount/token",
    ]);
    assert!(ok, "read {pod}'s token: {token}");
    let payload = token.trim().split('.').nth(1).unwrap_or_default();
    let claims: serde_json::Value =
        serde_json::from_slice(&base64url(payload)).expect("the token's claims are JSON");
    let lasts = claims["exp"].as_i64().unwrap_or(0) - claims["iat"].as_i64().unwrap_or(0);
    assert_eq!(lasts, 600, "{pod}'s token lasts {lasts}s: {claims}");
    assert_eq!(
        claims["kubernetes.io"]["pod"]["name"].as_str(),
        Some(pod),
        "{claims}"
    );
}

#[test]
fn base64url_decodes_a_jwt_segment() {
    assert_eq!(base64url("eyJhIjoxfQ"), br#"{"a":1}"#.to_vec());
}
