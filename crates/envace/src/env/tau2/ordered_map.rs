//! A string-keyed map that keeps insertion order, like a Python dict, with serde support.
//!
//! The record model needs dict semantics: tool results list keys in insertion order, a removed
//! key keeps the others in place, and re-inserting an existing key keeps its position. The
//! `indexmap` dependency is used without its `std` and `serde` features (the feature set
//! `serde_json` already enables), so the hasher is named explicitly and serde is implemented
//! here.

use std::fmt;
use std::hash::RandomState;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

use indexmap::IndexMap;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An insertion-ordered map from strings to `V`. Equality is a dict's: the same keys with
/// equal values, in any order.
#[derive(Debug, Clone)]
pub struct OrderedMap<V>(IndexMap<String, V, RandomState>);

impl<V: PartialEq> PartialEq for OrderedMap<V> {
    fn eq(&self, other: &Self) -> bool {
        if self.0.len() != other.0.len() {
            return false;
        }
        // Fast path: maps cloned from one another keep their order, so compare in step and
        // fall back to look-ups (order-insensitive) only when the orders differ.
        let same_order = self
            .0
            .iter()
            .zip(other.0.iter())
            .all(|((k1, v1), (k2, v2))| k1 == k2 && v1 == v2);
        same_order || self.0 == other.0
    }
}

impl<V> Default for OrderedMap<V> {
    fn default() -> Self {
        OrderedMap(IndexMap::with_hasher(RandomState::new()))
    }
}

impl<V> Deref for OrderedMap<V> {
    type Target = IndexMap<String, V, RandomState>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl<V> DerefMut for OrderedMap<V> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl<V: Serialize> Serialize for OrderedMap<V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter())
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for OrderedMap<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MapVisitor<V>(PhantomData<V>);

        impl<'de, V: Deserialize<'de>> Visitor<'de> for MapVisitor<V> {
            type Value = OrderedMap<V>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
                let mut map = OrderedMap::default();
                while let Some((key, value)) = access.next_entry::<String, V>()? {
                    // Like a Python dict: a repeated key keeps its first position.
                    map.insert(key, value);
                }
                Ok(map)
            }
        }

        deserializer.deserialize_map(MapVisitor(PhantomData))
    }
}
