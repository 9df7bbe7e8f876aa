//! Signed requests: `X-Asyncflow-Signature: sha256=<hex HMAC-SHA256(secret, body)>` on the calls
//! of HTTP functions and on workflow callbacks, so a receiver can check they come from asyncflow.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Header carrying the signature.
pub const SIGNATURE_HEADER: &str = "x-asyncflow-signature";

/// `sha256=<hex>` of HMAC-SHA256(secret, body).
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    // HMAC accepts keys of any length; new_from_slice cannot fail for it.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Checks a signature header value in constant time.
pub fn verify(secret: &[u8], body: &[u8], header: &str) -> bool {
    let Some(hex_sig) = header.strip_prefix("sha256=") else { return false };
    let Ok(sig) = hex::decode(hex_sig) else { return false };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else { return false };
    mac.update(body);
    mac.verify_slice(&sig).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_verify_only_with_the_same_secret_and_body() {
        let sig = sign(b"s3cret", b"{\"a\":1}");
        assert!(sig.starts_with("sha256=") && sig.len() == 7 + 64);
        assert!(verify(b"s3cret", b"{\"a\":1}", &sig));
        assert!(!verify(b"other", b"{\"a\":1}", &sig));
        assert!(!verify(b"s3cret", b"{\"a\":2}", &sig));
        assert!(!verify(b"s3cret", b"{\"a\":1}", "sha256=zz"));
    }
}
