//! A bounded cache of per-format decoding tables, shared across calls.
//!
//! Tables are kept within [`LIMIT`] bytes, the least recently used evicted
//! first: a program that makes tables for many custom formats (a sweep over
//! biases, say) keeps the ones it uses now instead of every table it ever
//! built, and the tables of the formats it keeps using stay.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};

/// Bytes of tables kept (64 tables of 2^16 float64 values).
pub const LIMIT: usize = 32 << 20;

/// Tables by key, the least recently used evicted first past [`LIMIT`] bytes
/// (an evicted table stays alive while a caller still holds it).
pub struct TableCache<K> {
    inner: Mutex<Inner<K>>,
}

struct Inner<K> {
    map: HashMap<K, Arc<dyn Any + Send + Sync>>,
    order: VecDeque<(K, usize)>,
    bytes: usize,
}

impl<K: Hash + Eq + Clone> Default for TableCache<K> {
    fn default() -> Self {
        TableCache { inner: Mutex::new(Inner { map: HashMap::new(), order: VecDeque::new(), bytes: 0 }) }
    }
}

impl<K: Eq> Inner<K> {
    /// Take `key`'s entry out of the use order (few tables: a short scan).
    fn unlink(&mut self, key: &K) -> Option<(K, usize)> {
        let i = self.order.iter().position(|(k, _)| k == key)?;
        self.order.remove(i)
    }
}

impl<K: Hash + Eq + Clone> TableCache<K> {
    /// The table of `key`, built by `build` (outside the lock) when it is not kept.
    pub fn get<T: Copy + Send + Sync + 'static>(&self, key: K, build: impl FnOnce() -> Vec<T>) -> Arc<Vec<T>> {
        let lock = || self.inner.lock().unwrap_or_else(|e| e.into_inner());
        {
            let mut c = lock();
            if let Some(t) = c.map.get(&key).cloned() {
                if let Ok(t) = t.downcast::<Vec<T>>() {
                    // Most recently used: to the back.
                    if let Some(e) = c.unlink(&key) {
                        c.order.push_back(e);
                    }
                    return t;
                }
            }
        }
        let t = Arc::new(build());
        let size = t.len() * std::mem::size_of::<T>();
        let mut c = lock();
        c.map.insert(key.clone(), t.clone());
        // (A table of another type under the same key is replaced.)
        if let Some((_, old)) = c.unlink(&key) {
            c.bytes -= old;
        }
        c.order.push_back((key, size));
        c.bytes += size;
        while c.bytes > LIMIT && c.order.len() > 1 {
            let (k, s) = c.order.pop_front().expect("non-empty");
            c.map.remove(&k);
            c.bytes -= s;
        }
        t
    }

    /// Tables kept and their bytes.
    pub fn usage(&self) -> (usize, usize) {
        let c = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (c.map.len(), c.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_recent_tables_within_the_limit() {
        let c: TableCache<u32> = TableCache::default();
        let big = LIMIT / 8 / 4; // f64 values of a quarter of the limit
        let first = c.get(0, || vec![1.0f64; big]);
        for k in 1..20u32 {
            let t = c.get(k, || vec![k as f64; big]);
            assert_eq!(t[0], k as f64);
            let (n, bytes) = c.usage();
            assert!(bytes <= LIMIT && n <= 4, "{n} tables, {bytes} bytes");
        }
        // The evicted table is still valid for its holder, and is rebuilt on request.
        assert_eq!(first[big - 1], 1.0);
        assert_eq!(c.get(0, || vec![2.0f64; big])[0], 2.0);
        // A kept table is returned, not rebuilt; another type under the same key is built.
        assert_eq!(c.get(0, || vec![3.0f64; big])[0], 2.0);
        assert_eq!(c.get(19, || vec![0f32; 4]).len(), 4);
    }

    #[test]
    fn a_table_in_use_stays() {
        let c: TableCache<u32> = TableCache::default();
        let big = LIMIT / 8 / 4;
        c.get(0, || vec![0.0f64; big]);
        for k in 1..20u32 {
            c.get(k, || vec![k as f64; big]);
            // Used between the others: never evicted, never rebuilt.
            assert_eq!(c.get(0, || vec![9.0f64; big])[0], 0.0);
        }
    }
}
