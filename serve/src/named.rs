//! A name chosen from a registry: a newtype over one of its entries (`RouterKind` over
//! [`crate::router::ROUTERS`], `BackendKind`, `EvictionKind`), read and written by the entry's
//! name in files, flags and outputs, so adding an entry to a registry is all it takes to offer
//! it (no enum to extend).

/// Declares `$kind`, a name from the registry `$registry` of `$spec`s (each with `name` and
/// `about`); its default is the registry's first entry.
macro_rules! registry_kind {
    ($(#[$doc:meta])* $kind:ident, $spec:ty, $registry:path, $all:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy)]
        pub struct $kind(&'static $spec);

        impl $kind {
            /// The entry named `name`.
            pub fn from_name(name: &str) -> Option<$kind> {
                $registry.iter().find(|r| r.name == name).map($kind)
            }

            /// Its name.
            pub fn as_str(self) -> &'static str {
                self.0.name
            }

            /// Its registry entry.
            pub fn spec(self) -> &'static $spec {
                self.0
            }

            /// Every entry's name, in registry order.
            pub fn names() -> Vec<&'static str> {
                $registry.iter().map(|r| r.name).collect()
            }
        }

        impl Default for $kind {
            fn default() -> Self {
                $kind(&$registry[0])
            }
        }

        impl PartialEq for $kind {
            fn eq(&self, o: &Self) -> bool {
                self.0.name == o.0.name
            }
        }

        impl Eq for $kind {}

        impl std::fmt::Debug for $kind {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0.name)
            }
        }

        impl std::fmt::Display for $kind {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0.name)
            }
        }

        impl std::str::FromStr for $kind {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                $kind::from_name(s)
                    .ok_or_else(|| format!("one of {} (got `{s}`)", $kind::names().join(", ")))
            }
        }

        impl serde::Serialize for $kind {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.0.name)
            }
        }

        impl<'de> serde::Deserialize<'de> for $kind {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }

        static $all: std::sync::LazyLock<Vec<$kind>> =
            std::sync::LazyLock::new(|| $registry.iter().map($kind).collect());

        #[cfg(feature = "clap")]
        impl clap::ValueEnum for $kind {
            fn value_variants<'a>() -> &'a [Self] {
                &$all
            }

            fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
                Some(clap::builder::PossibleValue::new(self.0.name).help(self.0.about))
            }
        }

        impl $kind {
            /// Every entry, in registry order.
            pub fn all() -> &'static [$kind] {
                &$all
            }
        }
    };
}

pub(crate) use registry_kind;
