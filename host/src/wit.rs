//! The one module that runs `bindgen!` for the `idem:handler` world.
//!
//! Every import is async (the database and HTTP capabilities await I/O) and
//! trappable: a host function returns `wasmtime::Result<Result<T, E>>`, where
//! the outer error is a host fault that traps the guest and the inner one is
//! a domain error the guest sees and may handle.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "handler",
    imports: { default: async | trappable },
    exports: { default: async },
});

pub use self::idem::handler::{config, db, emit, http, log, origin, types};
