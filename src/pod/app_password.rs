//! Which version of the application role's password Secret (`<name>-app`) the writable
//! server's role follows, as its instance manager tells it: the pod condition
//! [`APP_PASSWORD`], written on its own pod when it changes
//! (`instance::run::app_password`).
//!
//! | status | reason | when |
//! |---|---|---|
//! | `True` | [`FOLLOWS`] | the role's password is the Secret's at the version the message names |
//!
//! `kubectl lockstep rotate-password` waits for the primary's condition to name the
//! version its write made.

/// The pod condition's type.
pub const APP_PASSWORD: &str = "lockstep.dev/AppPassword";

/// The condition's reason.
pub const FOLLOWS: &str = "Follows";

/// The message's words before the version.
const PREFIX: &str = "the application role's password is its Secret's, version ";

/// The condition for the Secret at `version`.
#[must_use]
pub fn condition(version: &str) -> (&'static str, &'static str, String) {
    ("True", FOLLOWS, format!("{PREFIX}{version}"))
}

/// The version a condition's message names.
#[must_use]
pub fn version(message: &str) -> Option<&str> {
    message.strip_prefix(PREFIX).filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_version_and_gives_it_back() {
        let (status, reason, message) = condition("4711");
        assert_eq!((status, reason), ("True", FOLLOWS));
        assert_eq!(version(&message), Some("4711"));
        assert_eq!(version("something else"), None);
    }
}
