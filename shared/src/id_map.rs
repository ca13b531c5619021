//! A map from ids (budget names, request ids, job ids) to values, kept as a vector sorted by id:
//! the one sorted map of the engine and the page client.
//!
//! Not a `BTreeMap`: its code is kilobytes of wasm (ARCHITECTURE.md, "Size"), and these maps
//! hold a handful of budgets, or what one page waits on (a few requests, at most some thousands
//! of jobs), for which a binary search and moving a few entries on change is quick. (The
//! engine's queues of jobs, which may hold a million, are `SortedQueue`s in blocks.)

/// Entries sorted by id, each id once.
#[derive(Debug)]
pub struct IdMap<V>(Vec<(String, V)>);

impl<V> Default for IdMap<V> {
    fn default() -> Self {
        IdMap(Vec::new())
    }
}

impl<V> IdMap<V> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Where `id` is, or where it would go.
    fn position(&self, id: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(id))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains_key(&self, id: &str) -> bool {
        self.position(id).is_ok()
    }

    pub fn get(&self, id: &str) -> Option<&V> {
        let i = self.position(id).ok()?;
        Some(&self.0[i].1)
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut V> {
        let i = self.position(id).ok()?;
        Some(&mut self.0[i].1)
    }

    /// Sets the value of `id`, replacing any earlier one.
    pub fn insert(&mut self, id: String, value: V) {
        match self.position(&id) {
            Ok(i) => self.0[i].1 = value,
            Err(i) => self.0.insert(i, (id, value)),
        }
    }

    /// Keeps the entries `keep` says to, in their order.
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &V) -> bool) {
        self.0.retain(|(id, v)| keep(id, v));
    }

    /// The value of `id`, made by `make` when there is none yet.
    pub fn get_or_insert_with(&mut self, id: &str, make: impl FnOnce() -> V) -> &mut V {
        let i = match self.position(id) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(i, (id.to_string(), make()));
                i
            }
        };
        &mut self.0[i].1
    }

    pub fn remove(&mut self, id: &str) -> Option<V> {
        let i = self.position(id).ok()?;
        Some(self.0.remove(i).1)
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// In id order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &V)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    /// In id order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&String, &mut V)> {
        self.0.iter_mut().map(|(k, v)| (&*k, v))
    }

    /// In id order.
    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.0.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.0.iter().map(|(_, v)| v)
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.0.iter_mut().map(|(_, v)| v)
    }

    /// Empties the map, returning what it held in id order.
    pub fn take(&mut self) -> Vec<(String, V)> {
        std::mem::take(&mut self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_one_value_per_id_in_id_order() {
        let mut m = IdMap::new();
        m.insert("b".into(), 2);
        m.insert("a".into(), 1);
        m.insert("c".into(), 3);
        m.insert("b".into(), 20);
        assert_eq!(m.len(), 3);
        assert_eq!(
            m.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        assert_eq!(m.get_mut("b"), Some(&mut 20));
        *m.get_or_insert_with("b", || 0) += 1;
        *m.get_or_insert_with("d", || 40) += 1;
        assert_eq!(m.values().copied().collect::<Vec<_>>(), [1, 21, 3, 41]);
        assert_eq!(m.remove("a"), Some(1));
        assert_eq!(m.remove("a"), None);
        assert!(!m.contains_key("a") && m.contains_key("d"));
        for v in m.values_mut() {
            *v = 0;
        }
        assert_eq!(
            m.take(),
            [("b".into(), 0), ("c".into(), 0), ("d".into(), 0)]
        );
        assert!(m.is_empty());
    }
}
