//! The commands that change runs: `cancel`, `terminate`, `redrive`, `delete`. Each goes through
//! the library's operation of the same name (`flowdag_runtime::durable::cancel_run`, …), so
//! the command line and an application's own code do the same thing.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use clap::{Arg, ArgAction, ArgMatches, Command};
use flowdag_runtime::durable::{
    DurableError, Stop, cancel_run, delete_runs, redrive_run, terminate_run,
};
use flowdag_runtime::store::{Owner, RunFilter, RunStatus, RunSummary, StoreError};
use serde_json::json;

use crate::table::printable;
use crate::{CliError, Opened, Registered, find, parse_time};

/// The subcommands, each with the store's arguments `common` adds and the run argument `run`.
pub(crate) fn commands(common: impl Fn(Command) -> Command, run: impl Fn() -> Arg) -> [Command; 4] {
    let reason = || {
        Arg::new("reason")
            .long("reason")
            .value_name("TEXT")
            .help("Why: journaled with the request, and shown by `flow show`")
    };
    let json = || {
        Arg::new("json")
            .long("json")
            .action(ArgAction::SetTrue)
            .help("Print JSON, for scripts")
    };
    let workflow = || {
        Arg::new("workflow")
            .long("workflow")
            .value_name("NAME")
            .help("Every run of this workflow (with the other filters)")
    };
    [
        common(Command::new("cancel"))
            .about("Cancel a run: its running steps are cancelled and its compensations run, by the process that holds it or the next that loads it")
            .arg(run())
            .arg(reason()),
        common(Command::new("terminate"))
            .about("Terminate runs: they end cancelled at once, without compensation (by its holder when a live process holds one)")
            .arg(run().required(false).required_unless_present("workflow"))
            .arg(workflow().conflicts_with("run"))
            .arg(
                Arg::new("graph-hash")
                    .long("graph-hash")
                    .value_name("HEX")
                    .requires("workflow")
                    .value_parser(parse_hash)
                    .help("With --workflow: only the runs started with this graph (`flow runs --json` shows each run's `graph_hash`): the runs of an abandoned version"),
            )
            .arg(reason()),
        common(Command::new("redrive"))
            .about("Set a failed or cancelled run going again from where it stopped: completed steps keep their outputs, failed steps get new attempts")
            .arg(run())
            .arg(json()),
        common(Command::new("delete"))
            .about("Delete finished runs and everything stored for them")
            .arg(
                Arg::new("run")
                    .value_name("RUN")
                    .num_args(0..)
                    .help("The runs to delete, by id"),
            )
            .arg(
                Arg::new("status")
                    .long("status")
                    .value_name("STATUS")
                    .value_parser(["succeeded", "failed", "cancelled"])
                    .value_delimiter(',')
                    .action(ArgAction::Append)
                    .help("Every finished run in one of these statuses (repeat it or separate with commas)"),
            )
            .arg(workflow())
            .arg(
                Arg::new("until")
                    .long("until")
                    .value_name("TIME")
                    .value_parser(parse_time)
                    .help("Every finished run created before TIME (UTC: 2026-11-27, 2026-11-27T09:30:00Z, or ms since the epoch)"),
            )
            .arg(
                Arg::new("id-contains")
                    .long("id-contains")
                    .value_name("TEXT")
                    .help("Every finished run whose id contains TEXT"),
            )
            .group(
                clap::ArgGroup::new("which")
                    .args(["run", "status", "workflow", "until", "id-contains"])
                    .multiple(true)
                    .required(true),
            )
            .arg(json()),
    ]
}

/// `--graph-hash`: a graph's hash in hexadecimal (`0x` or not).
fn parse_hash(text: &str) -> Result<u64, String> {
    let digits = text.strip_prefix("0x").unwrap_or(text);
    u64::from_str_radix(digits, 16)
        .map_err(|_| format!("`{text}` is not a graph hash: 16 hexadecimal digits"))
}

/// Runs operation `name` with its arguments `sub`.
pub(crate) async fn run(
    name: &str,
    sub: &ArgMatches,
    opened: &Opened,
    path: &Path,
    workflows: &BTreeMap<String, Registered>,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let reason = sub
        .try_get_one::<String>("reason")
        .ok()
        .flatten()
        .map(String::as_str);
    let json = sub.try_get_one::<bool>("json").ok().flatten() == Some(&true);
    let run = sub.try_get_one::<String>("run").ok().flatten();
    match (name, run) {
        ("cancel", Some(id)) => cancel(opened, path, id, reason, workflows, out).await,
        ("terminate", Some(id)) => terminate(opened, path, id, reason, out).await,
        ("terminate", None) => {
            let workflow = sub.get_one::<String>("workflow").cloned();
            let hash = sub.get_one::<u64>("graph-hash").copied();
            terminate_all(opened, workflow, hash, reason, out).await
        }
        ("redrive", Some(id)) => redrive(opened, path, id, json, out).await,
        _ => delete(opened, path, sub, json, out).await,
    }
}

/// The operator, as the store records it (`host:pid:…` of this process).
fn operator() -> Owner {
    Owner::process()
}

/// A refusal of the library's, as the command line's.
fn refused(error: DurableError) -> CliError {
    match error {
        DurableError::Store(StoreError::WrongStatus { run, status, needs }) => CliError::Refused {
            run,
            why: format!("it is {status}: {needs}"),
        },
        DurableError::Store(StoreError::Finished { run }) => CliError::Refused {
            run,
            why: "it has finished".to_owned(),
        },
        DurableError::Redrive { run, why } => CliError::Refused { run, why },
        DurableError::Store(error) => CliError::Store(error),
        error => CliError::Resume(error),
    }
}

async fn cancel(
    opened: &Opened,
    path: &Path,
    id: &str,
    reason: Option<&str>,
    workflows: &BTreeMap<String, Registered>,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let store = opened.store();
    let summary = find(store, path, id).await?;
    let stop = cancel_run(store, id, reason).await.map_err(refused)?;
    let shown = printable(id);
    match stop {
        Stop::Requested {
            holder: Some(holder),
        } => writeln!(
            out,
            "cancel of run `{shown}` requested: `{}`, which holds it, cancels it (within its request poll)",
            printable(&holder)
        )?,
        // Nobody holds it: a binary that has its workflow and owns the store cancels it now.
        Stop::Requested { holder: None }
            if opened.owns() && workflows.contains_key(summary.workflow.as_str()) =>
        {
            if let Some(Registered { resume, .. }) = workflows.get(summary.workflow.as_str()) {
                let outcome = resume(opened, id).await.map_err(CliError::Resume)?;
                let status = find(store, path, id).await?.status;
                writeln!(out, "run `{shown}` cancelled here: {status}")?;
                if let Err(error) = outcome.result {
                    writeln!(out, "{}", printable(&error.to_string()))?;
                }
            }
        }
        Stop::Requested { holder: None } | Stop::Ended => writeln!(
            out,
            "cancel of run `{shown}` requested: nobody holds it; the next worker (or `flow resume` of a binary that registers `{}`) that loads it cancels it and runs its compensations",
            printable(&summary.workflow)
        )?,
        _ => writeln!(out, "cancel of run `{shown}` requested")?,
    }
    Ok(())
}

async fn terminate(
    opened: &Opened,
    path: &Path,
    id: &str,
    reason: Option<&str>,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let store = opened.store();
    find(store, path, id).await?;
    let stop = terminate_run(store, id, reason, &operator())
        .await
        .map_err(refused)?;
    write_stop(id, &stop, out)
}

fn write_stop(id: &str, stop: &Stop, out: &mut dyn Write) -> Result<(), CliError> {
    let shown = printable(id);
    match stop {
        Stop::Ended => writeln!(out, "run `{shown}` terminated: cancelled")?,
        Stop::Requested {
            holder: Some(holder),
        } => writeln!(
            out,
            "termination of run `{shown}` requested: `{}`, which holds it, ends it (within its request poll)",
            printable(holder)
        )?,
        Stop::Requested { holder: None } => writeln!(
            out,
            "termination of run `{shown}` requested: the process that owns the store ends it when it next runs it"
        )?,
        _ => writeln!(out, "termination of run `{shown}` requested")?,
    }
    Ok(())
}

/// `flow terminate --workflow W [--graph-hash H]`: every unfinished run of `W` (started with
/// graph `H`).
async fn terminate_all(
    opened: &Opened,
    workflow: Option<String>,
    hash: Option<u64>,
    reason: Option<&str>,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let store = opened.store();
    let filter = RunFilter {
        workflow,
        statuses: RunStatus::ALL
            .into_iter()
            .filter(|s| !s.is_finished())
            .collect(),
        ..RunFilter::default()
    };
    let runs: Vec<RunSummary> = store
        .list_runs(&filter)
        .await?
        .into_iter()
        .filter(|run| hash.is_none_or(|h| run.graph_hash == h))
        .collect();
    let mut ended = 0usize;
    for run in &runs {
        match terminate_run(store, &run.id, reason, &operator()).await {
            Ok(stop) => {
                ended += usize::from(stop == Stop::Ended);
                write_stop(&run.id, &stop, out)?;
            }
            // It finished meanwhile.
            Err(DurableError::Store(StoreError::Finished { .. } | StoreError::NotFound { .. })) => {
            }
            Err(error) => return Err(refused(error)),
        }
    }
    writeln!(
        out,
        "{} unfinished run(s) selected, {ended} terminated here",
        runs.len()
    )?;
    Ok(())
}

async fn redrive(
    opened: &Opened,
    path: &Path,
    id: &str,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let store = opened.store();
    find(store, path, id).await?;
    let redriven = redrive_run(store, id).await.map_err(refused)?;
    if json {
        let failed: Vec<_> = redriven
            .failed
            .iter()
            .map(|(step, attempt)| json!({ "step": step, "last_attempt": attempt }))
            .collect();
        let value = json!({ "run": id, "from": redriven.from, "failed": failed });
        writeln!(out, "{value}")?;
        return Ok(());
    }
    let shown = printable(id);
    writeln!(
        out,
        "run `{shown}` redriven: it replays its journal up to event #{} and goes on from there",
        redriven.from
    )?;
    for (step, attempt) in &redriven.failed {
        writeln!(
            out,
            "  step `{}` gets a new attempt ({}, a new key) with its whole retry budget",
            printable(step),
            attempt + 1
        )?;
    }
    writeln!(
        out,
        "it is running with no owner: a worker picks it up, or `flow resume` in a binary that registers its workflow"
    )?;
    Ok(())
}

async fn delete(
    opened: &Opened,
    path: &Path,
    sub: &ArgMatches,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let store = opened.store();
    let ids: Vec<String> = sub
        .get_many::<String>("run")
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    let mut deleted = Vec::new();
    if ids.is_empty() {
        let filter = RunFilter {
            workflow: sub.get_one::<String>("workflow").cloned(),
            statuses: sub
                .get_many::<String>("status")
                .into_iter()
                .flatten()
                .filter_map(|name| name.parse().ok())
                .collect(),
            id_contains: sub.get_one::<String>("id-contains").cloned(),
            created_before_ms: sub.get_one::<u64>("until").copied(),
            ..RunFilter::default()
        };
        deleted = delete_runs(store, &filter).await.map_err(refused)?;
    } else {
        // Every run given is checked before any is deleted: one that does not exist or has
        // not finished refuses the command, and nothing is deleted.
        for id in &ids {
            let run = find(store, path, id).await?;
            if !run.status.is_finished() {
                return Err(CliError::Refused {
                    run: run.id,
                    why: format!(
                        "it is {}: only a finished run can be deleted; nothing was deleted",
                        run.status
                    ),
                });
            }
        }
        for id in ids {
            match store.delete_run(&id).await {
                Ok(()) => deleted.push(id),
                Err(error) => return Err(refused(DurableError::Store(error))),
            }
        }
    }
    if json {
        writeln!(out, "{}", json!({ "deleted": deleted }))?;
        return Ok(());
    }
    for id in &deleted {
        writeln!(out, "deleted `{}`", printable(id))?;
    }
    writeln!(out, "{} run(s) deleted", deleted.len())?;
    Ok(())
}
