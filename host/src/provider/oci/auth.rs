//! Registry credentials from a pull Secret (`kubernetes.io/dockerconfigjson`, the kind
//! `kubectl create secret docker-registry` writes): the entry for the reference's registry.

use oci_client::secrets::RegistryAuth;
use serde::Deserialize;
use sigstore_verify::types::SignatureBytes;

/// A pull Secret the host cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// Not a docker config.
    #[error("pull Secret {secret}: key .dockerconfigjson is missing or not JSON: {message}")]
    Format {
        /// `namespace/name`.
        secret: String,
        /// What is wrong.
        message: String,
    },
    /// No entry for the registry.
    #[error("pull Secret {secret} has no credentials for registry {registry} (has: {available})")]
    NoEntry {
        /// `namespace/name`.
        secret: String,
        /// The registry.
        registry: String,
        /// The registries it has.
        available: String,
    },
}

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: std::collections::BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    auth: Option<String>,
}

/// The server name a docker config key stands for (`https://host/v1/` → `host`).
fn server(key: &str) -> &str {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    key.split('/').next().unwrap_or(key)
}

/// The credentials for `registry` in a `.dockerconfigjson` (`secret` names it in errors).
pub fn from_docker_config(
    config: &[u8],
    registry: &str,
    secret: &str,
) -> Result<RegistryAuth, AuthError> {
    let format = |message: String| AuthError::Format {
        secret: secret.to_owned(),
        message,
    };
    let parsed: DockerConfig =
        serde_json::from_slice(config).map_err(|err| format(err.to_string()))?;
    let wanted = if registry == "docker.io" {
        "index.docker.io"
    } else {
        registry
    };
    let Some(entry) = parsed
        .auths
        .iter()
        .find(|(key, _)| server(key) == registry || server(key) == wanted)
        .map(|(_, entry)| entry)
    else {
        return Err(AuthError::NoEntry {
            secret: secret.to_owned(),
            registry: registry.to_owned(),
            available: parsed
                .auths
                .keys()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", "),
        });
    };
    match (&entry.username, &entry.password, &entry.auth) {
        (Some(user), Some(password), _) => Ok(RegistryAuth::Basic(user.clone(), password.clone())),
        (_, _, Some(auth)) => {
            let decoded = SignatureBytes::from_base64(auth)
                .map_err(|_| format(format!("auths[{registry}].auth is not base64")))?;
            let text = String::from_utf8(decoded.as_bytes().to_vec())
                .map_err(|_| format(format!("auths[{registry}].auth is not UTF-8")))?;
            let Some((user, password)) = text.split_once(':') else {
                return Err(format(format!(
                    "auths[{registry}].auth is not base64 of user:password"
                )));
            };
            Ok(RegistryAuth::Basic(user.to_owned(), password.to_owned()))
        }
        _ => Err(format(format!(
            "auths[{registry}] has neither username and password nor auth"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_by_registry() {
        let config = br#"{"auths": {
            "127.0.0.1:5000": {"username": "u", "password": "p"},
            "https://index.docker.io/v1/": {"auth": "YWxpY2U6c2VjcmV0"}
        }}"#;
        assert!(matches!(
            from_docker_config(config, "127.0.0.1:5000", "ns/pull").unwrap(),
            RegistryAuth::Basic(u, p) if u == "u" && p == "p"
        ));
        assert!(matches!(
            from_docker_config(config, "docker.io", "ns/pull").unwrap(),
            RegistryAuth::Basic(u, p) if u == "alice" && p == "secret"
        ));
        let missing = from_docker_config(config, "ghcr.io", "ns/pull").unwrap_err();
        assert!(missing.to_string().contains("127.0.0.1:5000"), "{missing}");
        assert!(matches!(
            from_docker_config(b"{", "ghcr.io", "ns/pull").unwrap_err(),
            AuthError::Format { .. }
        ));
    }
}
