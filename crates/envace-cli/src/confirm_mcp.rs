//! Asking the user to confirm the stdio MCP servers a config would run: `envace config
//! confirm-mcp`, and `envace train`'s prompt on a terminal, both showing each exact command line.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use envace::config::ExperimentConfig;
use envace::trust;

/// Shows each unconfirmed server of `config` and asks once per command line (or confirms them
/// all with `yes`). Returns whether every server is confirmed now.
pub fn ask(config: &ExperimentConfig, file: &Path, yes: bool) -> Result<bool> {
    let path = trust::default_path()?;
    let pending = trust::pending(config, &path)?;
    let stdin = std::io::stdin();
    let mut all = true;
    for server in &pending {
        eprintln!(
            "{}: {} starts an MCP server for the {} domain with this command line:\n\n    {}\n",
            file.display(),
            server.field,
            server.domain,
            server.command_line
        );
        let confirmed = if yes {
            true
        } else {
            eprint!("Run this command whenever a job needs it? [y/N] ");
            std::io::stderr().flush()?;
            let mut answer = String::new();
            stdin.lock().read_line(&mut answer)?;
            matches!(answer.trim().to_lowercase().as_str(), "y" | "yes")
        };
        if confirmed {
            trust::confirm(&path, &server.argv)?;
            eprintln!("confirmed (recorded in {})", path.display());
        } else {
            eprintln!("not confirmed: it will not run");
            all = false;
        }
    }
    Ok(all)
}

/// `envace config confirm-mcp FILE [--yes]`.
pub fn confirm_command(file: &Path, yes: bool) -> Result<ExitCode> {
    let config = envace::config::parse_file(file)?;
    if !config.env.has_stdio_mcp_server() {
        out!("{} starts no MCP server", file.display());
        return Ok(ExitCode::SUCCESS);
    }
    if ask(&config, file, yes)? {
        out!(
            "every MCP server command of {} is confirmed",
            file.display()
        );
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::FAILURE)
    }
}

/// `envace train`'s prompt: on a terminal, asks about unconfirmed servers before the job
/// starts; elsewhere the job's own refusal says what to run.
pub fn prompt_before_training(config: &ExperimentConfig, file: &Path) -> Result<()> {
    if config.env.has_stdio_mcp_server() && std::io::stdin().is_terminal() {
        ask(config, file, false)?;
    }
    Ok(())
}
