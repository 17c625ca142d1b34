//! Values addressed by a `u32` handle, the way the protocol drivers keep what rides in the
//! engine's packets (their headers) and what its timers stand for: a freed handle is reused
//! before the slab grows, last freed first, so a run allocates nothing once its working set is
//! reached and the handles a run hands out depend only on its events (deterministic).

pub struct Slab<T> {
    items: Vec<T>,
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab { items: Vec::new(), free: Vec::new() }
    }
}

impl<T: Copy> Slab<T> {
    /// Stores `v`; its handle.
    pub fn put(&mut self, v: T) -> u32 {
        match self.free.pop() {
            Some(s) => {
                self.items[s as usize] = v;
                s
            }
            None => {
                self.items.push(v);
                self.items.len() as u32 - 1
            }
        }
    }

    /// The value of handle `h`, which is freed.
    pub fn take(&mut self, h: u32) -> T {
        self.free.push(h);
        self.items[h as usize]
    }

    /// The value of live handle `h`.
    pub fn get(&self, h: u32) -> T {
        self.items[h as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::Slab;

    #[test]
    fn freed_handles_are_reused_last_freed_first_before_the_slab_grows() {
        let mut s = Slab::default();
        let (a, b, c) = (s.put('a'), s.put('b'), s.put('c'));
        assert_eq!((a, b, c), (0, 1, 2));
        assert_eq!((s.take(a), s.take(c)), ('a', 'c'));
        assert_eq!(s.put('d'), c);
        assert_eq!(s.put('e'), a);
        assert_eq!(s.put('f'), 3);
        assert_eq!((s.get(a), s.get(b), s.get(c)), ('e', 'b', 'd'));
    }
}
