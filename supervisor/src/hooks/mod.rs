//! Firmware hooks: board-specific executables in `firmware-hooks/<board>/<event>` that drive what
//! only the board's own tools can reach (an embedded controller that owns the fans, APU power limits).
//!
//! Protocol: the supervisor runs `<hooks_dir>/<board>/<event>` with one flat JSON object on stdin
//! (`{"event":"set-fan","duty_pct":40}`; flat so a POSIX shell hook can read it), the environment
//! `LUCEBOX_ROOT` (sysfs root, empty on a live machine) and `LUCEBOX_BOARD`, and a timeout. The hook
//! answers one JSON object on stdout, `{"ok":true}` or `{"ok":false,"detail":"why"}`, and exits 0.
//! A board without an executable for an event does not support it. Failures are logged and
//! published to the status model; a fan command that fails hands the fan back to firmware auto.

mod board;
mod event;
mod lifecycle;
mod runner;

pub use board::{Board, Dmi};
pub use event::{EventError, HookEvent, HookReply};
pub use lifecycle::report_engine_crashes;
pub use runner::{HookError, HookOutcome, HookRunner, DEFAULT_TIMEOUT};

use std::path::Path;

use crate::hardware::SysRoot;
use crate::status::{Level, StatusModel};

/// Where `lucebox install-appliance` puts the hooks and where the appliance looks for them.
pub const DEFAULT_HOOKS_DIR: &str = "/usr/local/lib/lucebox/firmware-hooks";

/// The hook folder in `hooks_dir` of the board DMI names below `root`, when there is one.
pub fn installed_board_dir(hooks_dir: &Path, root: &SysRoot) -> Option<std::path::PathBuf> {
    let board = Board::detect(root)?;
    let dir = hooks_dir.join(board.dir_name());
    dir.is_dir().then_some(dir)
}

/// Status-model source name for hook events.
const SOURCE: &str = "hooks";

/// The hooks of the board this machine is, with failures logged and published.
#[derive(Clone)]
pub struct FirmwareHooks {
    board: Board,
    runner: HookRunner,
    status: StatusModel,
}

/// What happened to a fan command.
#[derive(Debug)]
pub enum FanOutcome {
    /// The hook applied the duty.
    Applied,
    /// The board has no `set-fan` hook: the fan stays with the firmware.
    Unsupported,
    /// `set-fan` failed; the fan was handed back to firmware auto (or that failed too, which
    /// leaves the firmware's own protection in charge).
    FellBackToAuto { error: HookError, auto_applied: bool },
}

impl FirmwareHooks {
    /// The hooks `runner` runs, for `board` (named in what is logged and published).
    pub fn new(board: Board, runner: HookRunner, status: StatusModel) -> Self {
        Self { board, runner, status }
    }

    /// The hooks in `hooks_dir` for the board DMI below `root` names, or `None` for a board
    /// without hooks or without its folder there (its firmware keeps the fans).
    pub fn for_this_board(hooks_dir: &Path, root: &SysRoot, status: StatusModel) -> Option<Self> {
        let board = Board::detect(root)?;
        let board_dir = installed_board_dir(hooks_dir, root)?;
        status.event(
            SOURCE,
            Level::Info,
            format!("board {}: firmware hooks in {}", board.display_name(), board_dir.display()),
        );
        Some(Self::new(board, HookRunner::for_board_dir(board_dir, root.clone()), status))
    }

    pub fn board(&self) -> Board {
        self.board
    }

    /// Runs the hook for `event`; a failure is logged and published to the status model and
    /// returned for the caller to fall back on (no hook failure may stop the supervisor).
    pub async fn dispatch(&self, event: &HookEvent) -> Result<HookOutcome, HookError> {
        let result = self.runner.call(event).await;
        match &result {
            Ok(HookOutcome::Applied(reply)) => tracing::debug!(
                board = self.board().dir_name(),
                event = event.name(),
                detail = reply.detail.as_deref().unwrap_or(""),
                "hook applied"
            ),
            Ok(HookOutcome::NotProvided) => {
                tracing::debug!(board = self.board().dir_name(), event = event.name(), "no hook")
            }
            Err(error) => self.status.event(
                SOURCE,
                Level::Warn,
                format!("{} hook `{}` failed: {error}", self.board().display_name(), event.name()),
            ),
        }
        result
    }

    /// Sets the fan duty through the board's hook; on failure hands the fan back to firmware auto
    /// so a broken hook never leaves the fan at a low fixed speed.
    pub async fn set_fan(&self, duty_pct: u8, fan: Option<u32>) -> FanOutcome {
        let event = match HookEvent::set_fan(duty_pct, fan) {
            Ok(event) => event,
            Err(error) => return self.fall_back_to_auto(fan, HookError::Event(error)).await,
        };
        match self.dispatch(&event).await {
            Ok(HookOutcome::Applied(_)) => FanOutcome::Applied,
            Ok(HookOutcome::NotProvided) => FanOutcome::Unsupported,
            Err(error) => self.fall_back_to_auto(fan, error).await,
        }
    }

    async fn fall_back_to_auto(&self, fan: Option<u32>, error: HookError) -> FanOutcome {
        let auto_applied =
            matches!(self.dispatch(&HookEvent::FanAuto { fan }).await, Ok(HookOutcome::Applied(_)));
        if !auto_applied {
            self.status.event(
                SOURCE,
                Level::Error,
                format!("{}: could not hand the fan back to firmware auto", self.board().display_name()),
            );
        }
        FanOutcome::FellBackToAuto { error, auto_applied }
    }
}
