//! API keys in the OS keyring (the Secret Service on Linux, Keychain on macOS, Credential
//! Manager on Windows), stored under the name of the environment variable that an endpoint's
//! `api_key_env` names; the engine's OpenAI client reads them from here when that variable is
//! not set. A key never goes into a config file.

use envace::openai::KeySource;

use crate::contract::StudioError;

/// The keyring service the studio's keys are stored under (the app's identifier).
pub const SERVICE: &str = "org.envace.studio";

/// The OS keyring as the engine's second source of API keys.
#[derive(Debug)]
pub struct Keyring;

impl KeySource for Keyring {
    fn name(&self) -> &str {
        "the OS keyring"
    }

    fn key(&self, var: &str) -> Result<String, String> {
        entry(var)
            .map_err(|err| err.detail)?
            .get_password()
            .map_err(|err| match err {
                keyring::Error::NoEntry => "none stored".to_owned(),
                other => unavailable(&other),
            })
    }
}

/// Whether `name` can name an environment variable (what `api_key_env` accepts).
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn entry(name: &str) -> Result<keyring::Entry, StudioError> {
    if !valid_name(name) {
        return Err(StudioError::new(
            "Cannot use the keyring",
            format!(
                "{name:?} is not an environment variable name (letters, digits and _); set api_key_env first, the key is stored under that name"
            ),
        ));
    }
    keyring::Entry::new(SERVICE, name)
        .map_err(|err| StudioError::new("Cannot use the keyring", unavailable(&err)))
}

/// The message for a keyring that cannot be used, saying what would make it work.
fn unavailable(err: &keyring::Error) -> String {
    format!(
        "the OS keyring is not available ({err}); on Linux it needs a Secret Service such as GNOME Keyring or KWallet running in the desktop session, otherwise export the key in the environment variable before starting the studio"
    )
}

/// Stores `key` under `name`, replacing any key stored there.
pub fn store(name: &str, key: &str) -> Result<(), StudioError> {
    if key.trim().is_empty() {
        return Err(StudioError::new(
            "Cannot store the API key",
            "the key is empty",
        ));
    }
    entry(name)?
        .set_password(key.trim())
        .map_err(|err| StudioError::new("Cannot store the API key", unavailable(&err)))
}

/// Removes the key stored under `name`; `false` when there was none.
pub fn forget(name: &str) -> Result<bool, StudioError> {
    match entry(name)?.delete_credential() {
        Ok(()) => Ok(true),
        Err(keyring::Error::NoEntry) => Ok(false),
        Err(err) => Err(StudioError::new(
            "Cannot remove the API key",
            unavailable(&err),
        )),
    }
}

#[cfg(test)]
mod leak_tests;

#[cfg(test)]
mod tests {
    use super::valid_name;

    #[test]
    fn key_names_are_environment_variable_names() {
        for (name, ok) in [
            ("OPENAI_API_KEY", true),
            ("_k1", true),
            ("", false),
            ("1KEY", false),
            ("MY-KEY", false),
            ("sk-abc", false),
        ] {
            assert_eq!(valid_name(name), ok, "{name}");
        }
    }
}
