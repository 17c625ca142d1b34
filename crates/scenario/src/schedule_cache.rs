//! The process-wide caches of built schedules (packet backend) and timing plans (flow
//! backend), per (algorithm, collective, layout): every scenario with a collective goes through
//! them, so a sweep over sizes builds a schedule or plan once.

use reducelab_sched::algos::Layout;
use reducelab_sched::{Collective, Plan, Schedule};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Largest rank count of a timing plan (schedules have their own limit per variant: the
/// registry's `max_ranks`).
const MAX_RANKS: u32 = reducelab_sched::registry::MAX_RANKS;

/// A cache key: (algorithm, collective, layout's dimensions).
type CacheKey = (String, String, Vec<u32>);

/// A process-wide cache of built schedules or timing plans, per (algorithm, collective,
/// layout), with the total size of its entries.
struct Cache<T> {
    map: HashMap<CacheKey, (Arc<T>, u64)>,
    weight: u64,
}

impl<T> Default for Cache<T> {
    fn default() -> Self {
        Cache { map: HashMap::new(), weight: 0 }
    }
}

/// Most entries kept per cache; a cache is emptied when it would grow beyond this.
const CACHE_ENTRIES: usize = 64;

/// Most transfers (schedules) or messages (plans) a cache keeps, about 200 MB: every scenario
/// with a collective goes through the caches, and a long-lived process (a sweep worker, the
/// fuzz test) meets many schedules. A cache is emptied when a new entry would exceed this (the
/// new entry is kept even if it alone does).
const CACHE_WEIGHT: u64 = 1 << 22;

/// The size of a cache entry in [`CACHE_WEIGHT`]'s units (at least 1).
trait Weight {
    fn weight(&self) -> u64;
}

impl Weight for Schedule {
    fn weight(&self) -> u64 {
        self.programs
            .iter()
            .flat_map(|p| &p.steps)
            .map(|st| (st.sends.len() + st.recvs.len()) as u64)
            .sum::<u64>()
            .max(1)
    }
}

impl Weight for Plan {
    fn weight(&self) -> u64 {
        self.steps.iter().map(|st| st.msgs.len() as u64).sum::<u64>().max(1)
    }
}

/// `build()` for (`algorithm`, `collective`, `layout`) from `cache`, after checking the rank
/// count against `limit`.
fn cached<T: Weight>(
    cache: &Mutex<Cache<T>>,
    algorithm: &str,
    collective: Collective,
    layout: &Layout,
    limit: u32,
    what: &str,
    build: impl FnOnce() -> Result<T, String>,
) -> Result<Arc<T>, String> {
    let key = (algorithm.to_string(), format!("{collective:?}"), layout.dims.clone());
    if let Some((b, _)) = cache.lock().unwrap_or_else(|e| e.into_inner()).map.get(&key) {
        return Ok(b.clone());
    }
    let p = layout.ranks();
    if p > limit {
        return Err(format!("{p} ranks is more than the {limit} that '{algorithm}' {what} support"));
    }
    // Built outside the lock so that concurrent callers do not wait on each other.
    let b = Arc::new(build()?);
    let w = b.weight();
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    if c.map.len() >= CACHE_ENTRIES || c.weight + w > CACHE_WEIGHT {
        c.map.clear();
        c.weight = 0;
    }
    if let Some((_, old)) = c.map.insert(key, (b.clone(), w)) {
        c.weight -= old; // built twice by concurrent callers
    }
    c.weight += w;
    Ok(b)
}

/// The `collective` schedule of variant `algorithm` for `layout`, from the process-wide cache.
/// Ring-like schedules grow as p², so they are limited to fewer ranks (the registry's `max_ranks`).
pub fn cached_schedule(algorithm: &str, collective: Collective, layout: &Layout) -> Result<Arc<Schedule>, String> {
    static CACHE: OnceLock<Mutex<Cache<Schedule>>> = OnceLock::new();
    let limit = reducelab_sched::registry::variant_entry(algorithm)?.max_ranks;
    cached(
        CACHE.get_or_init(Default::default),
        algorithm,
        collective,
        layout,
        limit,
        "schedules (packet level)",
        || reducelab_sched::registry::build(algorithm, collective, layout),
    )
}

/// Imported MSCCL programs per (path, hash of the file's text).
type ImportCache = HashMap<(std::path::PathBuf, u64), Arc<Schedule>>;

/// The MSCCL XML program in `path`, imported and proven by the checker
/// ([`reducelab_sched::from_msccl_xml`]), from a process-wide cache keyed by the path and the
/// file's contents (a sweep over sizes imports it once; an edited file is imported again).
pub fn cached_msccl(path: &std::path::Path) -> Result<Arc<Schedule>, String> {
    use std::hash::{Hash, Hasher};
    static CACHE: OnceLock<Mutex<ImportCache>> = OnceLock::new();
    // Bounded, so that a name like /dev/zero is refused rather than read forever.
    const MAX_XML_BYTES: u64 = 256 << 20;
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(
            std::fs::File::open(path).map_err(|e| format!("cannot read: {e}"))?,
            MAX_XML_BYTES + 1,
        ),
        &mut text,
    )
    .map_err(|e| format!("cannot read: {e}"))?;
    if text.len() as u64 > MAX_XML_BYTES {
        return Err(format!("larger than {MAX_XML_BYTES} bytes"));
    }
    // DefaultHasher::new() has fixed keys: the same text hashes the same in every process.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    let key = (path.to_path_buf(), h.finish());
    let cache = CACHE.get_or_init(Default::default);
    if let Some(s) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(s.clone());
    }
    let s = Arc::new(reducelab_sched::from_msccl_xml(&text)?);
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    if c.len() >= CACHE_ENTRIES {
        c.clear();
    }
    c.insert(key, s.clone());
    Ok(s)
}

/// The timing plan of a collective entry: an imported program's derived from its schedule, a
/// registry variant's from [`cached_plan`].
pub fn collective_plan(
    algorithm: &str,
    layout: &Layout,
    imported: Option<&Arc<Schedule>>,
) -> Result<Arc<Plan>, String> {
    match imported {
        Some(s) => Plan::from_schedule(s).map(Arc::new),
        None => cached_plan(algorithm, layout),
    }
}

/// The allreduce timing plan of variant `algorithm` for `layout` (flow backend), from the
/// process-wide cache. Built without materialising the schedule where that is large.
pub fn cached_plan(algorithm: &str, layout: &Layout) -> Result<Arc<Plan>, String> {
    static CACHE: OnceLock<Mutex<Cache<Plan>>> = OnceLock::new();
    reducelab_sched::registry::variant_entry(algorithm)?;
    cached(
        CACHE.get_or_init(Default::default),
        algorithm,
        Collective::Allreduce,
        layout,
        MAX_RANKS,
        "timing plans",
        || reducelab_sched::plan::plan(algorithm, layout),
    )
}
