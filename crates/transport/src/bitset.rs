//! A fixed-size set of packet sequence numbers.

#[derive(Clone, Debug, Default)]
pub(crate) struct Bitset {
    words: Vec<u64>,
}

impl Bitset {
    pub fn new(n: u32) -> Bitset {
        Bitset { words: vec![0; (n as usize).div_ceil(64)] }
    }
    #[inline]
    pub fn get(&self, i: u32) -> bool {
        self.words[(i / 64) as usize] >> (i % 64) & 1 == 1
    }
    /// Sets bit `i`; true if it was clear.
    #[inline]
    pub fn insert(&mut self, i: u32) -> bool {
        let w = &mut self.words[(i / 64) as usize];
        let was = *w >> (i % 64) & 1 == 1;
        *w |= 1 << (i % 64);
        !was
    }
    /// Clears bit `i`; true if it was set.
    #[inline]
    pub fn remove(&mut self, i: u32) -> bool {
        let w = &mut self.words[(i / 64) as usize];
        let was = *w >> (i % 64) & 1 == 1;
        *w &= !(1 << (i % 64));
        was
    }
    /// The lowest set bit at or after word `from_word`, if any.
    #[inline]
    pub fn first_from(&self, from_word: usize) -> Option<u32> {
        self.words[from_word.min(self.words.len())..]
            .iter()
            .position(|&w| w != 0)
            .map(|k| ((from_word + k) * 64) as u32 + self.words[from_word + k].trailing_zeros())
    }
}
