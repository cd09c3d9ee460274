//! The studio's hold on its one training job: the engine's controller trains on its own
//! worker thread, and a forwarding thread relays each of its events to the window as a typed
//! [`TrainingEvent`], so the front end is driven by events and never polls the store.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use envace::controller::{Command, Controller, Event, JobSpec};
use tauri::AppHandle;
use tauri_specta::Event as _;

use crate::contract::{StudioError, TrainingEvent};

/// The job being trained, as the commands see it.
#[derive(Debug)]
struct ActiveJob {
    /// Its run in the store.
    run: i32,
    /// The controller's command channel (the controller itself lives on the forwarding
    /// thread, which owns its event stream).
    commands: Sender<Command>,
}

/// The job slot, shared with the forwarding thread.
#[derive(Debug, Default)]
struct Slot {
    active: Mutex<Option<ActiveJob>>,
    /// Notified whenever the slot is freed.
    freed: Condvar,
}

/// The training job of the studio, if one runs: at most one at a time.
#[derive(Debug, Default)]
pub struct Training {
    slot: Arc<Slot>,
    /// Set once the window has asked to close and the job was told to stop.
    closing: AtomicBool,
}

/// How long a closing window waits for the job to checkpoint and stop before it closes anyway
/// (the job stops after its current step, which a large model may take minutes to finish).
pub const CLOSE_STOP_TIMEOUT: Duration = Duration::from_secs(300);

fn lock(slot: &Slot) -> MutexGuard<'_, Option<ActiveJob>> {
    // A panic while holding this lock leaves only an `Option` behind: still usable.
    slot.active
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Training {
    /// Starts `spec` on the engine's controller and forwards its events to `app`; returns the
    /// run. Refused while another job trains.
    pub fn start(&self, app: AppHandle, spec: JobSpec) -> Result<i32, StudioError> {
        let mut active = lock(&self.slot);
        if let Some(job) = active.as_ref() {
            return Err(StudioError::new(
                "Cannot start training",
                format!("run {} is still training; stop it first", job.run),
            ));
        }
        let controller = Controller::start(spec)
            .map_err(|err| StudioError::from_engine("Cannot start training", &err))?;
        let run = i32::try_from(controller.run().0).unwrap_or(i32::MAX);
        *active = Some(ActiveJob {
            run,
            commands: controller.commands(),
        });
        drop(active);
        let shared = Arc::clone(&self.slot);
        std::thread::Builder::new()
            .name(format!("studio-events-{run}"))
            .spawn(move || forward(&app, controller, run, &shared))
            .map_err(|err| {
                StudioError::new(
                    "Cannot start training",
                    format!("could not start the event forwarding thread: {err}"),
                )
            })?;
        Ok(run)
    }

    /// Sends `command` to the running job; `what` names the action for the error when none runs.
    pub fn send(&self, command: Command, what: &str) -> Result<i32, StudioError> {
        let active = lock(&self.slot);
        let job = active
            .as_ref()
            .ok_or_else(|| StudioError::new(what, "no training job is running"))?;
        job.commands
            .send(command)
            .map_err(|_| StudioError::new(what, format!("run {} has already ended", job.run)))?;
        Ok(job.run)
    }

    /// The run being trained, if any.
    pub fn running(&self) -> Option<i32> {
        lock(&self.slot).as_ref().map(|job| job.run)
    }

    /// The window asks to close: tells a running job to stop (it checkpoints after its current
    /// step) and returns its run, so that the window waits for it with [`Training::wait_ended`].
    /// Returns `None` when nothing trains, or when a stop for closing is already under way (a
    /// second close request closes at once).
    pub fn stop_for_close(&self, app: &AppHandle) -> Option<i32> {
        if self.closing.swap(true, Ordering::SeqCst) {
            return None;
        }
        let active = lock(&self.slot);
        let job = active.as_ref()?;
        job.commands.send(Command::Stop).ok()?;
        let _ = TrainingEvent::Log {
            level: "info".to_owned(),
            message: format!(
                "the window is closing: run {} checkpoints and stops first (close again to quit at once)",
                job.run
            ),
        }
        .emit(app);
        Some(job.run)
    }

    /// Waits until `run` has ended (its final status is in the store) or `timeout` passes;
    /// returns whether it ended.
    pub fn wait_ended(&self, run: i32, timeout: Duration) -> bool {
        let active = lock(&self.slot);
        let (active, _) = self
            .slot
            .freed
            .wait_timeout_while(active, timeout, |slot| {
                slot.as_ref().is_some_and(|job| job.run == run)
            })
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        active.as_ref().is_none_or(|job| job.run != run)
    }
}

/// Relays the controller's events until the job ends, then releases the job slot. The slot is
/// freed before the `finished` event goes out, so the window may start again at once.
fn forward(app: &AppHandle, controller: Controller, run: i32, active: &Slot) {
    let mut finished = false;
    while let Ok(event) = controller.events().recv() {
        finished = matches!(event, Event::Finished { .. });
        if finished {
            release(active, run);
        }
        // The window may be gone while the job ends; nothing else can be told then.
        let _ = TrainingEvent::from_engine(run, event).emit(app);
        if finished {
            break;
        }
    }
    let outcome = controller.wait();
    release(active, run);
    if !finished {
        let detail = match outcome {
            Err(err) => err.to_string(),
            Ok(_) => "the training worker ended without reporting how".to_owned(),
        };
        let _ = TrainingEvent::Finished {
            run,
            status: "failed".to_owned(),
            error: Some(StudioError::new("Training failed", detail)),
        }
        .emit(app);
    }
}

/// Frees the job slot if it still holds `run` (a newer job may hold it already). The engine
/// has written the run's final status by then: it reports `Finished` after the store.
fn release(slot: &Slot, run: i32) {
    let mut active = lock(slot);
    if active.as_ref().is_some_and(|job| job.run == run) {
        active.take();
        slot.freed.notify_all();
    }
}
