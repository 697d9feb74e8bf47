//! The pooling instance allocator, sized from the handlers' config.
//!
//! Every event gets a fresh instance (a reused one would keep a guest's
//! statics across a rolled-back transaction), so instantiation is on the
//! hot path. On demand, each instance maps and unmaps its memory, tables
//! and fiber stack: measured on this project's 2-core machine, about 50 µs
//! per fresh store and half of the host's CPU time in the kernel (TLB
//! shootdowns). The pool reserves slots once and resets only the pages an
//! instance dirtied (about 8 µs).
//!
//! Sizing: one instance is alive per execution (`concurrency`), or up to
//! `[handler.batch] max_concurrent` per execution when a batch's events
//! run at once, so a pool of twice the sum of those (plus a few for
//! start-up checks) is never full in normal operation; a revoked partition's
//! execution may briefly overlap its next one. Instances kept between
//! events (`events_per_instance`, see `warm`) hold their slots while idle,
//! but there are never more idle than were in use at once, and a swapped-out
//! version's go with it. Should it be full anyway,
//! instantiation fails with [`wasmtime::PoolConcurrencyLimitError`], which
//! the executor classifies as the host's own shortage (retried, never the
//! event's failure). Per-component limits are generous so that components
//! from other toolchains (componentize-py's CPython has several core
//! instances and a table of tens of thousands of functions) still fit; a
//! component that does not fit is refused at start-up, with wasmtime's
//! reason, by the instantiation check.

use wasmtime::{Enabled, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How large the instance pool is.
#[derive(Debug, Clone, Copy)]
pub struct PoolSize {
    /// Component instances alive at once.
    pub instances: u32,
    /// The largest linear memory any handler may grow to (each handler's
    /// own limit is enforced per store, below this).
    pub max_memory_bytes: usize,
}

impl Default for PoolSize {
    fn default() -> Self {
        Self { instances: 16, max_memory_bytes: 256 << 20 }
    }
}

impl PoolSize {
    /// For handlers that process `concurrency` partitions at once in all,
    /// the largest of which may grow its memory to `max_memory_bytes`.
    /// The pool's own memory limit is never below the default: a
    /// component whose initial memory exceeds a handler's limit must be
    /// refused by the instantiation check with that handler's limit named,
    /// not by the compiler for not fitting the pool (each store's limiter
    /// enforces each handler's own).
    pub fn for_concurrency(concurrency: usize, max_memory_bytes: usize) -> Self {
        let instances = u32::try_from(concurrency.saturating_mul(2).saturating_add(4)).unwrap_or(u32::MAX);
        Self { instances, max_memory_bytes: max_memory_bytes.max(Self::default().max_memory_bytes) }
    }

    pub(super) fn strategy(self) -> InstanceAllocationStrategy {
        let n = self.instances.max(1);
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(n)
            .total_core_instances(n.saturating_mul(16))
            .total_memories(n.saturating_mul(2))
            .total_tables(n.saturating_mul(4))
            .total_stacks(n)
            .max_memories_per_module(2)
            .max_tables_per_module(4)
            .table_elements(100_000)
            .max_core_instance_size(4 << 20)
            .max_component_instance_size(4 << 20)
            .max_memory_size(self.max_memory_bytes)
            // Pages an instance touched stay mapped and are zeroed (only the
            // dirty ones, where the kernel can say which) instead of being
            // unmapped and faulted in again by the next instance.
            .linear_memory_keep_resident(4 << 20)
            .table_keep_resident(1 << 20)
            .pagemap_scan(Enabled::Auto);
        InstanceAllocationStrategy::Pooling(pool)
    }
}
