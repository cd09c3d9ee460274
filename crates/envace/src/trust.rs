//! Confirming the stdio MCP servers an experiment names: a command runs only after the user has
//! seen its exact command line and said yes once, remembered in one file that the command line
//! and the studio share.
//!
//! The file (`confirmed-mcp-servers.json` beside the default run store's folder: under
//! `$ENVACE_HOME` when set, else the platform's config directory) lists confirmed command
//! lines as argument vectors. A confirmation covers exactly one vector: another argument, a
//! changed path or a different program asks again. An unreadable file is an error naming it
//! and is never overwritten. Servers reached by URL spawn nothing and need no confirmation.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::{ExperimentConfig, McpServerConfig};
use crate::error::{Error, Result};

/// The file name of the confirmations.
pub const FILE_NAME: &str = "confirmed-mcp-servers.json";

/// Where confirmations are kept: `$ENVACE_HOME/confirmed-mcp-servers.json`, else the platform
/// config directory (`~/.config/envace-studio/` on Linux).
pub fn default_path() -> Result<PathBuf> {
    if let Some(home) = std::env::var_os("ENVACE_HOME").filter(|home| !home.is_empty()) {
        return Ok(PathBuf::from(home).join(FILE_NAME));
    }
    directories::ProjectDirs::from("", "", "envace-studio")
        .map(|dirs| dirs.config_dir().join(FILE_NAME))
        .ok_or(Error::NoDataDir)
}

/// A stdio server of the experiment that has not been confirmed yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pending {
    /// Where the config names it, e.g. `env.mcp_servers[0]`.
    pub field: String,
    /// The domain it would answer.
    pub domain: String,
    /// The program and its arguments, exactly as they will be run.
    pub argv: Vec<String>,
    /// The same as one line a shell would read back into `argv`.
    pub command_line: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Confirmations {
    version: u32,
    confirmed: Vec<Confirmed>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Confirmed {
    argv: Vec<String>,
    /// Seconds since the Unix epoch.
    at: u64,
}

fn read(path: &Path) -> Result<Confirmations> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Confirmations {
                version: 1,
                confirmed: Vec::new(),
            });
        }
        Err(err) => return Err(Error::io(path, err)),
    };
    let parsed: Confirmations = serde_json::from_slice(&bytes).map_err(|err| Error::Data {
        source_name: path.display().to_string(),
        message: format!(
            "the confirmed MCP servers cannot be read ({err}); fix or remove the file to confirm them again"
        ),
    })?;
    if parsed.version != 1 {
        return Err(Error::Data {
            source_name: path.display().to_string(),
            message: format!(
                "version {} of the confirmed MCP servers is newer than this build reads (1)",
                parsed.version
            ),
        });
    }
    Ok(parsed)
}

/// The experiment's stdio servers whose command lines `path` does not confirm, in config order.
pub fn pending(config: &ExperimentConfig, path: &Path) -> Result<Vec<Pending>> {
    let stdio: Vec<(usize, &McpServerConfig)> = config
        .env
        .mcp_servers
        .iter()
        .enumerate()
        .filter(|(_, server)| !server.command.is_empty())
        .collect();
    if stdio.is_empty() {
        return Ok(Vec::new());
    }
    let confirmed = read(path)?;
    Ok(stdio
        .into_iter()
        .filter(|(_, server)| !confirmed.confirmed.iter().any(|c| c.argv == server.command))
        .map(|(idx, server)| Pending {
            field: format!("env.mcp_servers[{idx}]"),
            domain: serde_json::to_value(server.domain)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            argv: server.command.clone(),
            command_line: command_line(&server.command),
        })
        .collect())
}

/// Records that the user confirmed running `argv`; confirming a confirmed line changes nothing.
pub fn confirm(path: &Path, argv: &[String]) -> Result<()> {
    if argv.first().is_none_or(String::is_empty) {
        return Err(Error::Data {
            source_name: path.display().to_string(),
            message: "an empty command line cannot be confirmed".to_owned(),
        });
    }
    let mut confirmations = read(path)?;
    if confirmations.confirmed.iter().any(|c| c.argv == argv) {
        return Ok(());
    }
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    confirmations.confirmed.push(Confirmed {
        argv: argv.to_vec(),
        at,
    });
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|err| Error::io(dir, err))?;
    }
    let mut text = serde_json::to_string_pretty(&confirmations).map_err(|err| Error::Data {
        source_name: path.display().to_string(),
        message: err.to_string(),
    })?;
    text.push('\n');
    crate::fsutil::write_atomically(path, text.as_bytes())
}

/// Fails with [`Error::McpUnconfirmed`], naming every exact command line, when the experiment
/// has a stdio server the confirmations at `path` do not cover.
pub fn check(config: &ExperimentConfig, path: &Path) -> Result<()> {
    let pending = pending(config, path)?;
    if pending.is_empty() {
        return Ok(());
    }
    Err(Error::McpUnconfirmed {
        servers: pending
            .iter()
            .map(|p| format!("{}: `{}`", p.field, p.command_line))
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// [`check`] against [`default_path`]; a config without stdio servers never reads the file.
pub fn check_default(config: &ExperimentConfig) -> Result<()> {
    if !config.env.has_stdio_mcp_server() {
        return Ok(());
    }
    check(config, &default_path()?)
}

/// `argv` as one line a POSIX shell splits back into the same words: plain words as they are,
/// others in single quotes.
pub fn command_line(argv: &[String]) -> String {
    argv.iter()
        .map(|arg| {
            let plain = !arg.is_empty()
                && arg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c));
            if plain {
                arg.clone()
            } else {
                format!("'{}'", arg.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn config_with(commands: &[&[&str]]) -> ExperimentConfig {
        let mut config = crate::config::parse(
            "[run]\nname = \"t\"\n[env]\ndomains = [\"functions\"]\n",
            "t.toml",
        )
        .unwrap();
        for command in commands {
            config.env.mcp_servers.push(McpServerConfig {
                domain: crate::config::Domain::Functions,
                command: command.iter().map(|s| (*s).to_owned()).collect(),
                url: None,
                timeout_secs: 30.0,
            });
        }
        config
    }

    #[test]
    fn a_command_line_is_quoted_so_a_shell_reads_back_the_same_words() {
        let argv: Vec<String> = ["python3", "my server.py", "--flag=it's", ""]
            .map(String::from)
            .to_vec();
        assert_eq!(
            command_line(&argv),
            r"python3 'my server.py' '--flag=it'\''s' ''"
        );
    }

    #[test]
    fn a_confirmation_covers_exactly_one_command_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join(FILE_NAME);
        let config = config_with(&[&["python3", "server.py"]]);
        let err = check(&config, &path).unwrap_err().to_string();
        assert!(
            err.contains("env.mcp_servers[0]: `python3 server.py`"),
            "{err}"
        );
        confirm(&path, &config.env.mcp_servers[0].command).unwrap();
        confirm(&path, &config.env.mcp_servers[0].command).unwrap();
        check(&config, &path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.matches("server.py").count(), 1, "{text}");

        let changed = config_with(&[&["python3", "server.py", "--debug"]]);
        let pending = pending(&changed, &path).unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].command_line, "python3 server.py --debug");
        assert_eq!(pending[0].domain, "functions");
    }

    #[test]
    fn an_unreadable_file_is_named_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        std::fs::write(&path, "{not json").unwrap();
        let config = config_with(&[&["server"]]);
        let err = check(&config, &path).unwrap_err().to_string();
        assert!(
            err.contains(FILE_NAME) && err.contains("cannot be read"),
            "{err}"
        );
        assert!(confirm(&path, &config.env.mcp_servers[0].command).is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{not json");
    }

    #[test]
    fn servers_reached_by_url_need_no_confirmation() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = config_with(&[]);
        config.env.mcp_servers.push(McpServerConfig {
            domain: crate::config::Domain::Functions,
            command: Vec::new(),
            url: Some("http://127.0.0.1:9/mcp".to_owned()),
            timeout_secs: 30.0,
        });
        check(&config, &dir.path().join(FILE_NAME)).unwrap();
    }
}
