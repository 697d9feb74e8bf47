//! What a handler can reach, one module per interface of the world
//! (`wit/`). Each is a [`Capability`] (`factor.rs`): as in wasmtime-wasi,
//! it owns its state (one per invocation) and implements its interface's
//! `Host` trait on that state, or on a view of it with what the invocation
//! shares (the transaction), never naming the store's type; as in Spin's
//! factors, it owns what its part of the handler's config means, what it
//! leaves after a call and what it does before COMMIT.
//!
//! Adding a capability: its interface in `wit/` (and `import` it in
//! `world.wit`), its module here implementing [`Capability`], and its line
//! in the `capabilities!` list below; the SDKs' counterparts
//! (`capabilities_tests` fails without them). ARCHITECTURE.md, "How to add
//! a capability", says the rest.

mod allowance;
pub(crate) mod config;
pub(crate) mod db;
pub(crate) mod emit;
mod factor;
mod fault;
pub(crate) mod http;
pub(crate) mod log;
pub(crate) mod origin;
pub mod tape;
#[cfg(test)]
mod tests;

pub(crate) use factor::{After, Call, Capability, Shared, Verdict};
pub use fault::HostFault;

use std::sync::Arc;

use uuid::Uuid;
use wasmtime::component::{HasSelf, Linker};

use crate::error::ExecError;
use crate::transaction::{EventTx, Lent};
use crate::wit;

/// The set of capabilities, one line each: `field: Type => its Settings`
/// (named, as the settings are public). It makes
/// [`Settings`] (each one's settings), [`Capabilities`] (one invocation's
/// states and the transaction they share), [`Left`] (what each left),
/// [`INTERFACES`] and [`add_to_linker`]; the executor sees only those.
macro_rules! capabilities {
    ($($field:ident: $ty:ty => $settings:ty,)+) => {
        /// The `idem:handler` interfaces served here: what a component may
        /// import of idem's world (`runtime::imports`, module uploads).
        pub(crate) const INTERFACES: &[&str] = &["types", $(<$ty as Capability>::INTERFACE,)+];

        /// Every capability's settings for one handler (`runtime::HandlerSettings`).
        #[derive(Debug, Clone, Default)]
        pub struct Settings {
            $(pub $field: $settings,)+
        }

        /// Every capability's ranges of `handler`'s section ([`Capability::check`]).
        pub(crate) fn check(handler: &crate::config::HandlerConfig) -> anyhow::Result<()> {
            $(<$ty as Capability>::check(handler)?;)+
            Ok(())
        }
        impl Settings {
            /// What `handler` configures, each capability reading its part
            /// (its ranges checked when the config loaded: [`check`]).
            pub(crate) fn of(handler: &crate::config::HandlerConfig) -> anyhow::Result<Self> {
                Ok(Self { $($field: <$ty as Capability>::settings(handler)?,)+ })
            }

            /// Shared by the handler's invocations.
            pub(crate) fn shared(&self) -> Arc<Policies> {
                Arc::new(Policies { $($field: Arc::new(self.$field.clone()),)+ })
            }
        }

        /// [`Settings`] as invocations hold them: each behind its own `Arc`.
        #[derive(Debug, Default)]
        pub(crate) struct Policies {
            $(pub(crate) $field: Arc<<$ty as Capability>::Settings>,)+
        }

        /// One invocation's capabilities, and the transaction they share.
        pub(crate) struct Capabilities {
            /// The event's transaction, lent for the invocation: the
            /// executor hands it (or a share of it) in here and takes it
            /// back after.
            pub(crate) tx: Lent,
            $(pub(crate) $field: $ty,)+
        }

        /// What one invocation's capabilities left, for its commit.
        #[derive(Default)]
        pub(crate) struct Left {
            $(pub(crate) $field: <$ty as Capability>::Left,)+
        }

        impl Capabilities {
            /// Every capability's state for one invocation in `tx`.
            pub(crate) fn new(tx: Lent, policies: &Policies, call: &Call<'_>) -> Self {
                Self { tx, $($field: <$ty as Capability>::prepare(&policies.$field, call),)+ }
            }

            /// What a kept instance's store holds between two invocations
            /// (`runtime::warm`): no transaction, and no allowance of any
            /// kind, so that nothing could be done with it even if guest
            /// code ran.
            pub(crate) fn husk(&self) -> Self {
                Self { tx: Lent::Returned, $($field: self.$field.husk(),)+ }
            }

            /// After the call: each capability's counters, its veto of the
            /// commit (the first one's), and what it left.
            pub(crate) fn finish(&mut self, stats: Option<&crate::stats::Stats>) -> (Verdict, Left) {
                let mut after = After { stats, veto: None, excuse: None };
                let left = Left { $($field: self.$field.finish(&mut after),)+ };
                (Verdict { veto: after.veto, excuse: after.excuse }, left)
            }
        }

        /// Just before COMMIT: what each capability does with what the
        /// events that ran in `tx` left (the outbox's rows, say).
        pub(crate) async fn before_commit(tx: &mut EventTx, left: &[(Uuid, &Left)]) -> Result<(), ExecError> {
            $(
                if <$ty as Capability>::BEFORE_COMMIT {
                    let theirs: Vec<(Uuid, &<$ty as Capability>::Left)> =
                        left.iter().map(|(id, l)| (*id, &l.$field)).collect();
                    <$ty as Capability>::before_commit(tx, &theirs).await?;
                }
            )+
            Ok(())
        }

        /// Links every interface of [`INTERFACES`], each on its
        /// capability's own state or view, projected from `T`.
        pub(crate) fn add_to_linker<T: HasCapabilities>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
            wit::types::add_to_linker::<T, HasSelf<Capabilities>>(linker, |t| t.capabilities())?;
            $(<$ty as Capability>::link(linker)?;)+
            Ok(())
        }
    };
}

// The order is the order of the vetoes: a request sent again changed wins
// over a failed statement.
capabilities! {
    http: http::HttpCapability => http::HttpPolicy,
    db: db::DbCapability => db::DbSettings,
    config: config::ConfigCapability => std::collections::BTreeMap<String, String>,
    log: log::LogCapability => (),
    emit: emit::EmitCapability => emit::EmitSettings,
    origin: origin::OriginCapability => (),
}

impl Capabilities {
    /// The `db` interface's view: its state, and the transaction.
    pub(crate) fn db(&mut self) -> db::DbView<'_> {
        db::DbView { ctx: &mut self.db, tx: &mut self.tx }
    }
}

/// A store's state that holds an invocation's [`Capabilities`].
pub(crate) trait HasCapabilities: Send + 'static {
    fn capabilities(&mut self) -> &mut Capabilities;
}

/// The `types` interface only defines types; its `Host` trait is empty.
impl wit::types::Host for Capabilities {}
