//! The names of the option enums: one parser and one printer per enum, so that the command
//! line, the C library and the Python module set options by the same names.

/// Implements, for a field-less enum, `ALL`, `name()`, `Display` (the name) and `FromStr`
/// (the name or an alias; anything else is an [`Error::Config`](crate::Error::Config) that
/// lists the known names).
macro_rules! option_names {
    ($ty:ident, $what:literal, { $($variant:ident => $name:literal $(| $alias:literal)*),+ $(,)? }) => {
        impl $ty {
            /// Every value, in the order their names are listed.
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];

            /// The value's name, as `FromStr` reads it and `Display` writes it.
            pub fn name(self) -> &'static str {
                match self {
                    $($ty::$variant => $name),+
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl std::str::FromStr for $ty {
            type Err = crate::error::Error;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($name $(| $alias)* => Ok($ty::$variant),)+
                    _ => Err(crate::error::Error::Config(format!(
                        concat!("unknown ", $what, " {:?}; known: {}"),
                        s,
                        [$($name),+].join(", ")
                    ))),
                }
            }
        }
    };
}
pub(crate) use option_names;

#[cfg(test)]
mod tests {
    use crate::mvcc::Gc;
    use crate::wal::{Durability, LogMode, Release};
    use crate::{Cc, Error, LockWait};

    /// Every value prints as a name that parses back to it.
    fn round_trip<T>(all: &[T])
    where
        T: Copy + PartialEq + std::fmt::Debug + std::fmt::Display + std::str::FromStr<Err = Error>,
    {
        for &v in all {
            assert_eq!(v.to_string().parse::<T>().unwrap(), v);
        }
    }

    #[test]
    fn names_round_trip() {
        round_trip(LogMode::ALL);
        round_trip(Release::ALL);
        round_trip(Durability::ALL);
        round_trip(Gc::ALL);
        round_trip(LockWait::ALL);
        round_trip(&Cc::all().collect::<Vec<_>>());
    }

    #[test]
    fn unknown_names_list_the_known_ones() {
        let e = "fsync".parse::<Durability>().unwrap_err();
        assert!(matches!(&e, Error::Config(m) if m.contains("\"fsync\"") && m.contains("sync, buffered, none")), "{e}");
        assert!("mvcc-si/nope".parse::<Cc>().is_err());
        assert_eq!("si/epo".parse::<Cc>().unwrap(), Cc::MvccSi(Gc::Epo));
        assert_eq!("2pl".parse::<Cc>().unwrap(), Cc::TwoPl(LockWait::NoWait));
        assert_eq!("p-wal".parse::<LogMode>().unwrap(), LogMode::PWal);
    }
}
