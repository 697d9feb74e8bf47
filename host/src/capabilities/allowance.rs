//! `[handler.limits]`: how many calls of one kind an invocation may make.

/// How many calls of one kind an invocation may still make
/// (`[handler.limits]`).
#[derive(Debug)]
pub(crate) struct Allowance {
    left: u32,
    limit: u32,
    /// The setting that sets it, for the refusal's message.
    setting: &'static str,
}

impl Allowance {
    pub(crate) fn new(limit: u32, setting: &'static str) -> Self {
        Self { left: limit, limit, setting }
    }

    /// Calls spent so far.
    pub(crate) fn spent(&self) -> u32 {
        self.limit - self.left
    }

    /// Spends one call, or says why there is none left.
    pub(crate) fn spend(&mut self, what: &str) -> Result<(), String> {
        if self.left == 0 {
            return Err(format!("more than {} {what} in one invocation (limits.{})", self.limit, self.setting));
        }
        self.left -= 1;
        Ok(())
    }
}
