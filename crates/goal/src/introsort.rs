//! The permutation libstdc++'s `std::sort` (GCC's introsort) makes of a sequence: LogGOPSim sorts
//! the operations one event freed on a rank with it, comparing only their kind, and that order
//! decides which of simultaneous sends leaves first. `std::sort` is not stable: past 16 elements its
//! partitions move equal elements, so a stable sort gives another order (and other times, e.g. in
//! an all-to-all where a rank frees a hundred sends at once). This module reproduces the algorithm
//! step for step — median-of-three pivot moved to the front, unguarded Hoare partition, recursion on
//! the right part, depth limit `2⌊log₂ n⌋` then heapsort, a final insertion sort (guarded on the
//! first 16) — so that it gives the same permutation for any input and comparison.

const THRESHOLD: usize = 16;

/// Sorts `v` by `less` exactly as libstdc++'s `std::sort(v.begin(), v.end(), less)` does.
pub(crate) fn std_sort<T: Copy>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    if v.len() < 2 {
        return;
    }
    let depth = 2 * (usize::BITS - 1 - v.len().leading_zeros()) as usize;
    introsort_loop(v, depth, less);
    final_insertion_sort(v, less);
}

fn introsort_loop<T: Copy>(v: &mut [T], mut depth: usize, less: &impl Fn(&T, &T) -> bool) {
    let mut last = v.len();
    while last > THRESHOLD {
        if depth == 0 {
            heap_sort(&mut v[..last], less);
            return;
        }
        depth -= 1;
        let cut = partition_pivot(&mut v[..last], less);
        introsort_loop(&mut v[cut..last], depth, less);
        last = cut;
    }
}

fn partition_pivot<T: Copy>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) -> usize {
    let (n, mid) = (v.len(), v.len() / 2);
    move_median_to_first(v, 1, mid, n - 1, less);
    // Unguarded partition of v[1..] around v[0].
    let (mut first, mut last) = (1, n);
    loop {
        while less(&v[first], &v[0]) {
            first += 1;
        }
        last -= 1;
        while less(&v[0], &v[last]) {
            last -= 1;
        }
        if first >= last {
            return first;
        }
        v.swap(first, last);
        first += 1;
    }
}

fn move_median_to_first<T: Copy>(v: &mut [T], a: usize, b: usize, c: usize, less: &impl Fn(&T, &T) -> bool) {
    let pick = if less(&v[a], &v[b]) {
        if less(&v[b], &v[c]) {
            b
        } else if less(&v[a], &v[c]) {
            c
        } else {
            a
        }
    } else if less(&v[a], &v[c]) {
        a
    } else if less(&v[b], &v[c]) {
        c
    } else {
        b
    };
    v.swap(0, pick);
}

fn final_insertion_sort<T: Copy>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    if v.len() > THRESHOLD {
        insertion_sort(&mut v[..THRESHOLD], less);
        for i in THRESHOLD..v.len() {
            unguarded_linear_insert(v, i, less);
        }
    } else {
        insertion_sort(v, less);
    }
}

fn insertion_sort<T: Copy>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    for i in 1..v.len() {
        if less(&v[i], &v[0]) {
            let x = v[i];
            v.copy_within(0..i, 1);
            v[0] = x;
        } else {
            unguarded_linear_insert(v, i, less);
        }
    }
}

fn unguarded_linear_insert<T: Copy>(v: &mut [T], mut i: usize, less: &impl Fn(&T, &T) -> bool) {
    let x = v[i];
    while less(&x, &v[i - 1]) {
        v[i] = v[i - 1];
        i -= 1;
    }
    v[i] = x;
}

/// `std::__partial_sort(first, last, last)`: make_heap then sort_heap, as libstdc++ writes them.
fn heap_sort<T: Copy>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    let n = v.len();
    if n < 2 {
        return;
    }
    let mut parent = (n - 2) / 2;
    loop {
        let x = v[parent];
        adjust_heap(v, parent, n, x, less);
        if parent == 0 {
            break;
        }
        parent -= 1;
    }
    let mut last = n;
    while last > 1 {
        last -= 1;
        let x = v[last];
        v[last] = v[0];
        adjust_heap(v, 0, last, x, less);
    }
}

fn adjust_heap<T: Copy>(v: &mut [T], mut hole: usize, len: usize, x: T, less: &impl Fn(&T, &T) -> bool) {
    let top = hole;
    let mut child = hole;
    while child < (len - 1) / 2 {
        child = 2 * (child + 1);
        if less(&v[child], &v[child - 1]) {
            child -= 1;
        }
        v[hole] = v[child];
        hole = child;
    }
    if len & 1 == 0 && child == (len - 2) / 2 {
        child = 2 * (child + 1);
        v[hole] = v[child - 1];
        hole = child - 1;
    }
    // push_heap of x from `hole` up to `top`.
    let mut parent = hole.wrapping_sub(1) / 2;
    while hole > top && less(&v[parent], &x) {
        v[hole] = v[parent];
        hole = parent;
        parent = hole.wrapping_sub(1) / 2;
    }
    v[hole] = x;
}

#[cfg(test)]
mod tests {
    use super::std_sort;

    fn keyed(keys: &[u8]) -> Vec<(u8, usize)> {
        keys.iter().copied().zip(0..).collect()
    }

    #[test]
    fn sorts_and_is_stable_up_to_16_elements() {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        for n in 0..300 {
            let keys: Vec<u8> = (0..n)
                .map(|_| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    (rng % 3) as u8
                })
                .collect();
            let mut v = keyed(&keys);
            std_sort(&mut v, &|a: &(u8, usize), b: &(u8, usize)| a.0 < b.0);
            assert!(v.windows(2).all(|w| w[0].0 <= w[1].0), "{v:?}");
            let mut idx: Vec<usize> = v.iter().map(|x| x.1).collect();
            if n <= 16 {
                assert!(v.windows(2).all(|w| w[0].0 < w[1].0 || w[0].1 < w[1].1), "{v:?}");
            }
            idx.sort_unstable();
            assert_eq!(idx, (0..n).collect::<Vec<_>>());
        }
    }

    /// libstdc++ 12.2 (`g++ -O2`, Debian 12): `std::sort` by key of pseudo-random keys (2 or 3
    /// distinct, as operation kinds), element `i` carrying `i`; the FNV-1a hash of the resulting
    /// order of `i`s, as that program printed it. The same generator here must give the same order.
    #[test]
    fn gives_libstdcxx_permutations() {
        const GOLDEN: [(u64, u64, u64); 16] = [
            (17, 2, 0xb9c6ac6cf7b08743),
            (17, 3, 0x099148e81376504f),
            (18, 2, 0xd8b7fa592b36a0ea),
            (18, 3, 0x1c5015322dc54dba),
            (33, 2, 0x779d3bfa0ec37c49),
            (33, 3, 0xea45c8c11bc49413),
            (64, 2, 0x603e42891c8fc1cf),
            (64, 3, 0xbc3a334efc861521),
            (100, 2, 0xc8002c8f535cedf3),
            (100, 3, 0x609348e488ebf82f),
            (257, 2, 0x5aaca98b03f68d33),
            (257, 3, 0x1c8f541496f8fba1),
            (1023, 2, 0x6df08503a6006f80),
            (1023, 3, 0x6b89ef82fbd5510e),
            (2046, 2, 0x17292f1ee63d05e0),
            (2046, 3, 0xb27f923887386566),
        ];
        for (len, kinds, want) in GOLDEN {
            let mut x: u64 = 12345 + len * 7 + kinds;
            let keys: Vec<u8> = (0..len)
                .map(|_| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    ((x >> 33) % kinds) as u8
                })
                .collect();
            let mut v = keyed(&keys);
            std_sort(&mut v, &|a: &(u8, usize), b: &(u8, usize)| a.0 < b.0);
            let mut h: u64 = 14695981039346656037;
            for e in &v {
                h ^= e.1 as u64;
                h = h.wrapping_mul(1099511628211);
            }
            assert_eq!(h, want, "{len} elements, {kinds} kinds");
        }
    }
}
