//! What one instance of a guest may create. Unlike wasmtime's
//! `StoreLimits`, whose memory limit holds for each linear memory on its
//! own, this counts every memory and every table of the store together: a
//! component with 32 memories gets `max_memory_bytes` in all, not 32 times it.

use wasmtime::ResourceLimiter;

/// Instances, tables and memories a store may hold. Rust guests use a few;
/// a componentize-py guest some tens of instances and tables.
const MAX_INSTANCES: usize = 128;
const MAX_TABLES: usize = 128;
const MAX_MEMORIES: usize = 32;

/// Table elements, all tables together (a Python guest's function tables
/// hold tens of thousands).
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

#[derive(Debug)]
pub(crate) struct GuestLimits {
    memory_left: usize,
    elements_left: usize,
}

impl GuestLimits {
    pub(crate) fn new(max_memory_bytes: usize) -> Self {
        Self { memory_left: max_memory_bytes, elements_left: MAX_TABLE_ELEMENTS }
    }
}

/// Spends `desired - current` of `left`; false (the grow fails, the guest
/// sees it fail) when that is more than is left.
fn spend(left: &mut usize, current: usize, desired: usize) -> bool {
    let grow = desired.saturating_sub(current);
    match left.checked_sub(grow) {
        Some(rest) => {
            *left = rest;
            true
        }
        None => false,
    }
}

impl ResourceLimiter for GuestLimits {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(spend(&mut self.memory_left, current, desired))
    }

    fn table_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(spend(&mut self.elements_left, current, desired))
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_counted_across_memories() {
        let mut limits = GuestLimits::new(100);
        assert!(limits.memory_growing(0, 60, None).expect("grow"));
        assert!(!limits.memory_growing(0, 60, None).expect("grow"), "a second memory shares the budget");
        assert!(limits.memory_growing(0, 40, None).expect("grow"));
        assert!(!limits.memory_growing(60, 61, None).expect("grow"), "nothing left");
    }
}
