//! Profile mode's recorder: feeds the engine's events into a pinwise-core `MemHistory` and
//! turns it into a `Profile` at the end.

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;
use pinwise_core::profile::Profile;
use pinwise_core::{Event, HistoryConfig, MemHistory, ModuleTable};

use crate::engine::EventSink;
use crate::error::AllocError;

/// Records a run's history; writes its profile to a file when the engine shuts down (if
/// given one), and keeps it for [`HistoryRecorder::last_profile`].
#[derive(Debug)]
pub struct HistoryRecorder {
    history: Mutex<MemHistory>,
    output: Option<PathBuf>,
    last: Mutex<Option<Profile>>,
}

impl HistoryRecorder {
    /// A recorder whose sites refer to `modules` (the engine's table), writing the profile
    /// to `output` at the end when it is `Some`.
    pub fn new(modules: Arc<ModuleTable>, output: Option<PathBuf>) -> Self {
        HistoryRecorder {
            history: Mutex::new(MemHistory::with_modules(HistoryConfig::default(), modules)),
            output,
            last: Mutex::new(None),
        }
    }

    /// The profile of what was recorded so far.
    pub fn profile(&self) -> Profile {
        Profile::from_history(&self.history.lock())
    }

    /// The profile built when the engine shut down, if it has.
    pub fn last_profile(&self) -> Option<Profile> {
        self.last.lock().clone()
    }

    /// Allocations recorded so far.
    pub fn allocations(&self) -> usize {
        self.history.lock().len()
    }
}

impl EventSink for HistoryRecorder {
    fn record(&self, event: Event) {
        self.history.lock().ingest(&event);
    }

    fn finish(&self) -> Result<(), AllocError> {
        let profile = self.profile();
        let result = match &self.output {
            Some(path) => profile.save(path).map_err(|e| AllocError::Profile {
                path: path.display().to_string(),
                message: e.to_string(),
            }),
            None => Ok(()),
        };
        *self.last.lock() = Some(profile);
        result
    }
}
