//! Laying one partly filled value over another, as a scenario's flags are laid over its file:
//! what the upper value sets wins, field by field.
//!
//! ```
//! use kvplan_vocab::overlay::Overlay;
//! use kvplan_vocab::overlay_fields;
//!
//! #[derive(Default)]
//! struct Workload { batch: Option<u32>, prompt: Option<u32> }
//! #[derive(Default)]
//! struct Raw { model: Option<String>, workload: Workload }
//!
//! let mut file = Raw { model: Some("llama-2-7b".into()), ..Default::default() };
//! let flags = Raw { workload: Workload { batch: Some(8), prompt: None }, ..Default::default() };
//! overlay_fields!(file, flags; model, workload.batch, workload.prompt);
//! assert_eq!((file.model.as_deref(), file.workload.batch), (Some("llama-2-7b"), Some(8)));
//!
//! let mut n = Some(1);
//! n.overlay(None);
//! assert_eq!(n, Some(1));
//! ```

/// A value another of its kind can be laid over.
pub trait Overlay {
    /// Lays `other` over `self`: what `other` sets wins.
    fn overlay(&mut self, other: Self);
}

/// An unset field (`None`) keeps what is below it; a set one replaces it.
impl<T> Overlay for Option<T> {
    fn overlay(&mut self, other: Self) {
        if other.is_some() {
            *self = other;
        }
    }
}

/// Lays the named fields of `$other` over those of `$into` with [`Overlay::overlay`]; a field
/// may be a path into a nested struct (`workload.batch`). Both are places (a variable, `self`);
/// `$other`'s fields are moved out of it.
#[macro_export]
macro_rules! overlay_fields {
    ($into:ident, $other:ident; $($($field:ident).+),* $(,)?) => {
        $($crate::overlay::Overlay::overlay(&mut $into.$($field).+, $other.$($field).+);)*
    };
}
