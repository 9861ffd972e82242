//! The JSON a hook reads on stdin and the JSON it answers.

use serde::{Deserialize, Serialize};

/// Highest power limit a hook accepts, in mW: above any Strix Halo board's cooling (about 140 W).
pub const MAX_POWER_LIMIT_MW: u32 = 200_000;

/// One event for a board hook. Serialised flat (`{"event":"set-fan","duty_pct":40}`) so a POSIX
/// shell hook can pick fields out with `sed`; the hook's file name is [`HookEvent::name`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case", deny_unknown_fields)]
pub enum HookEvent {
    /// The supervisor started: put the board in a known state (fans on firmware auto).
    Boot,
    /// Fixed fan duty in percent; `fan` picks one fan, absent means all.
    SetFan {
        duty_pct: u8,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fan: Option<u32>,
    },
    /// Hand the fan (or all fans) back to the firmware's own curve.
    FanAuto {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fan: Option<u32>,
    },
    /// APU package power limits in mW (sustained STAPM, fast boost, slow boost).
    PowerLimit { stapm_mw: u32, fast_mw: u32, slow_mw: u32 },
    /// An engine exited unexpectedly; the board goes back to safe defaults.
    EngineCrashed {
        engine: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit: Option<String>,
    },
    /// The supervisor is stopping: fans back to firmware auto.
    Shutdown,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EventError {
    #[error("set-fan: duty_pct {0} is over 100")]
    DutyOutOfRange(u8),
    #[error("power-limit: {field} = {value} mW is outside 1..={MAX_POWER_LIMIT_MW}")]
    PowerOutOfRange { field: &'static str, value: u32 },
    #[error("power-limit: slow_mw {slow} is above fast_mw {fast}")]
    SlowAboveFast { slow: u32, fast: u32 },
}

impl HookEvent {
    /// A validated `set-fan` event.
    pub fn set_fan(duty_pct: u8, fan: Option<u32>) -> Result<Self, EventError> {
        if duty_pct > 100 {
            return Err(EventError::DutyOutOfRange(duty_pct));
        }
        Ok(HookEvent::SetFan { duty_pct, fan })
    }

    /// A validated `power-limit` event.
    pub fn power_limit(stapm_mw: u32, fast_mw: u32, slow_mw: u32) -> Result<Self, EventError> {
        for (field, value) in [("stapm_mw", stapm_mw), ("fast_mw", fast_mw), ("slow_mw", slow_mw)] {
            if value == 0 || value > MAX_POWER_LIMIT_MW {
                return Err(EventError::PowerOutOfRange { field, value });
            }
        }
        if slow_mw > fast_mw {
            return Err(EventError::SlowAboveFast { slow: slow_mw, fast: fast_mw });
        }
        Ok(HookEvent::PowerLimit { stapm_mw, fast_mw, slow_mw })
    }

    /// The hook's file name in the board folder.
    pub fn name(&self) -> &'static str {
        match self {
            HookEvent::Boot => "boot",
            HookEvent::SetFan { .. } => "set-fan",
            HookEvent::FanAuto { .. } => "fan-auto",
            HookEvent::PowerLimit { .. } => "power-limit",
            HookEvent::EngineCrashed { .. } => "engine-crashed",
            HookEvent::Shutdown => "shutdown",
        }
    }
}

/// A hook's answer on stdout. Unknown fields are allowed so hooks can report more than we read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookReply {
    pub ok: bool,
    #[serde(default)]
    pub detail: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_serialise_flat_with_the_hook_name_as_tag() {
        let event = HookEvent::set_fan(40, None).unwrap();
        assert_eq!(serde_json::to_string(&event).unwrap(), r#"{"event":"set-fan","duty_pct":40}"#);
        let event = HookEvent::power_limit(85_000, 120_000, 100_000).unwrap();
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["event"], event.name());
        assert_eq!(json["stapm_mw"], 85_000);
        let back: HookEvent = serde_json::from_value(json).unwrap();
        assert_eq!(back, event);
    }

    #[test]
    fn rejects_out_of_range_values() {
        assert_eq!(HookEvent::set_fan(101, None), Err(EventError::DutyOutOfRange(101)));
        assert!(matches!(
            HookEvent::power_limit(0, 1, 1),
            Err(EventError::PowerOutOfRange { field: "stapm_mw", .. })
        ));
        assert!(matches!(
            HookEvent::power_limit(50_000, 60_000, 70_000),
            Err(EventError::SlowAboveFast { .. })
        ));
    }
}
