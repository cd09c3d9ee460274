//! `envace env call|mcp|replay` and `envace serve-env`: the built-in environments and any MCP
//! server from a terminal.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use envace::config::Domain;
use envace::env::tau2::eval::replay_gold;
use envace::env::tau2::{Db, DomainKind, Tau2Domain};
use envace::env::{Environment, render_outcome};
use envace::mcp::{McpEnvironment, McpOptions, McpServer, domain_factory, serve_http, serve_stdio};
use serde_json::Value;

use crate::commands::emit;
use crate::{DomainArg, EnvCommand};

fn domain(arg: DomainArg) -> Domain {
    match arg {
        DomainArg::Retail => Domain::Retail,
        DomainArg::Airline => Domain::Airline,
        DomainArg::Functions => Domain::Functions,
    }
}

pub fn serve_env(
    arg: DomainArg,
    stdio: bool,
    http: Option<SocketAddr>,
    data: Option<&Path>,
) -> Result<ExitCode> {
    let factory = domain_factory(domain(arg), data)?;
    if stdio {
        serve_stdio(&factory)?;
        return Ok(ExitCode::SUCCESS);
    }
    let Some(addr) = http else {
        bail!("pass --stdio or --http ADDR");
    };
    let server = serve_http(addr, &factory)?;
    eprintln!(
        "serving {arg:?} over MCP streamable HTTP at {}",
        server.url()
    );
    server.wait();
    Ok(ExitCode::SUCCESS)
}

pub fn env_command(command: EnvCommand) -> Result<ExitCode> {
    match command {
        EnvCommand::Call {
            domain: arg,
            tool,
            args,
            data,
        } => {
            let arguments: Value = serde_json::from_str(&args)
                .with_context(|| format!("--args {args:?} is not JSON"))?;
            let mut env = domain_factory(domain(arg), data.as_deref())?.make();
            let outcome = env.call(&tool, &arguments);
            out!("{}", render_outcome(&outcome));
            Ok(if outcome.is_failure() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        EnvCommand::Mcp {
            call,
            args,
            url,
            timeout,
            attempts,
            command,
        } => {
            let arguments: Value = serde_json::from_str(&args)
                .with_context(|| format!("--args {args:?} is not JSON"))?;
            let server = match (url, McpServer::from_argv(&command)) {
                (Some(url), _) => McpServer::Http { url },
                (None, Some(server)) => server,
                (None, None) => bail!("give the server's command after `--`, or --url URL"),
            };
            let options = McpOptions {
                connect_timeout_secs: timeout,
                call_timeout_secs: timeout,
                max_attempts: attempts,
                ..McpOptions::default()
            };
            let mut env = McpEnvironment::connect(server, options)?;
            let Some(tool) = call else {
                for spec in env.tools() {
                    let description = spec.description.lines().next().unwrap_or("");
                    out!("{}\t{description}", spec.name);
                }
                return Ok(ExitCode::SUCCESS);
            };
            let outcome = env.call(&tool, &arguments);
            out!("{}", render_outcome(&outcome));
            Ok(if outcome.is_failure() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        EnvCommand::Replay {
            domain: arg,
            data,
            task,
            dump_state,
            force,
        } => {
            let kind = match arg {
                DomainArg::Retail => DomainKind::Retail,
                DomainArg::Airline => DomainKind::Airline,
                DomainArg::Functions => {
                    bail!("the functions domain has no τ²-bench tasks to replay")
                }
            };
            let dir = if data.join("db.json").is_file() {
                data
            } else {
                data.join(kind.as_str())
            };
            let loaded = Tau2Domain::load(kind, &dir)?;
            let Some(found) = loaded.task(&task) else {
                bail!(
                    "{}: no task has id {task:?}",
                    dir.join("tasks.json").display()
                );
            };
            let replay = replay_gold(&loaded, found);
            let actions = found
                .evaluation_criteria
                .as_ref()
                .and_then(|c| c.actions.as_ref())
                .cloned()
                .unwrap_or_default();
            for (action, outcome) in actions.iter().zip(&replay.outcomes) {
                out!(
                    "{} {} -> {}",
                    action.name,
                    Value::Object(action.arguments.clone()),
                    render_outcome(outcome)
                );
            }
            out!("state_hash {}", replay.env.state_hash());
            if let Some(path) = dump_state {
                let text = match replay.env.db() {
                    Db::Retail(db) => serde_json::to_string_pretty(db)?,
                    Db::Airline(db) => serde_json::to_string_pretty(db)?,
                };
                emit(Some(&path), force, text.as_bytes())?;
                eprintln!("final state written to {}", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
