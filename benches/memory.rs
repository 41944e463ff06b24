//! Heap bytes per cached object, per kind: what one DistributedDB cluster costs the
//! operator's caches, measured with a counting allocator (no cluster needed).
//!
//! The objects are real ones, captured from the local control plane with the operator
//! running (`benches/fixtures/`: a DistributedDB of 3 replicas at rest, with its
//! StatefulSet, Service, pods and claims, as the API server sends them, managedFields
//! included). Each is copied `N` times under new names and owners, stored the way the
//! driver stores it ([`Owned::from_objects`] projects it; the custom resource as the
//! reflector keeps it), and the live heap growth is divided by `N`.
//!
//! `cargo bench --bench memory` (also part of `make bench`). Prints one line per kind
//! and the total per cluster.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::Resource;
use lockstep::driver::{Owned, Project};
use lockstep::machines::distributeddb::api::DistributedDB;
use serde::de::DeserializeOwned;

/// The system allocator, counting live bytes.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to `System` unchanged; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: forwarded with the caller's pointer, layout and size.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const N: usize = 1000;
const KIND_LABEL: &str = "distributeddb";

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

fn fixture<K: DeserializeOwned>(file: &str) -> K {
    let path = format!("{}/benches/fixtures/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `object` as the `j`-th of its kind in cluster `i`: its name, owner label and UID made
/// unique the way they differ between clusters (same lengths); the `j`-th pod or claim
/// ends in `-j`.
fn copy_of<K: Resource + Clone>(object: &K, i: usize, j: Option<usize>) -> K {
    let mut o = object.clone();
    let meta = o.meta_mut();
    let rename = |s: &str| s.replacen("demo", &format!("d{i:03}"), 1);
    meta.name = meta.name.as_deref().map(rename).map(|name| match j {
        Some(j) => format!("{}-{j}", name.rsplit_once('-').map_or(&*name, |(n, _)| n)),
        None => name,
    });
    meta.generate_name = meta.generate_name.as_deref().map(rename);
    meta.uid = meta
        .uid
        .as_ref()
        .map(|u| format!("{i:04}{}{}", j.unwrap_or(0), &u[5..]));
    if let Some(labels) = meta.labels.as_mut() {
        for value in labels.values_mut() {
            *value = rename(value);
        }
    }
    o
}

/// Heap bytes per object of `K`, stored projected in an owned-object store (with the
/// store's index); `per` is how many objects of this kind one cluster has.
fn owned<K: Project + DeserializeOwned>(file: &str, per: usize) -> (String, f64, usize) {
    let object: K = fixture(file);
    let copies: Vec<K> = (0..N)
        .flat_map(|i| {
            let object = &object;
            (0..per).map(move |j| copy_of(object, i, (per > 1).then_some(j)))
        })
        .collect();
    let before = live() - copies_bytes(&copies);
    let store = Owned::from_objects(KIND_LABEL, copies);
    let after = live();
    let per_object = (after - before) as f64 / (N * per) as f64;
    let stored = store.len();
    drop(store);
    (K::kind(&()).into_owned(), per_object, stored)
}

/// The heap bytes `objects` hold (measured by dropping clones).
fn copies_bytes<K: Clone>(objects: &[K]) -> isize {
    let before = live();
    let clones = objects.to_vec();
    let held = live() - before;
    drop(clones);
    held
}

/// Heap bytes per custom resource as the reflector store holds it (managedFields
/// cleared), and with managedFields (as a write returns it).
fn custom_resources(file: &str) -> (f64, f64) {
    let db: DistributedDB = fixture(file);
    let before = live();
    let stored: Vec<Arc<DistributedDB>> = (0..N)
        .map(|i| {
            let mut o = copy_of(&db, i, None);
            o.meta_mut().managed_fields = None;
            Arc::new(o)
        })
        .collect();
    let stripped = (live() - before) as f64 / N as f64;
    drop(stored);
    let before = live();
    let stored: Vec<Arc<DistributedDB>> = (0..N).map(|i| Arc::new(copy_of(&db, i, None))).collect();
    let whole = (live() - before) as f64 / N as f64;
    drop(stored);
    (stripped, whole)
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    let (cr, cr_whole) = custom_resources("distributeddb.json");
    let (cr_upgraded, cr_upgraded_whole) = custom_resources("distributeddb-upgraded.json");
    let rows = [
        owned::<StatefulSet>("statefulset.json", 1),
        owned::<Service>("service.json", 1),
        owned::<Pod>("pod.json", 3),
        owned::<PersistentVolumeClaim>("pvc.json", 3),
    ];
    println!("heap bytes per cached object ({N} clusters of 3 replicas)");
    println!(
        "  {:<28} {:>10} {:>6} {:>12}",
        "kind", "B/object", "per", "B/cluster"
    );
    println!(
        "  {:<28} {:>10.0} {:>6} {:>12.0}",
        "DistributedDB (store)", cr, 1, cr
    );
    println!(
        "  {:<28} {:>10.0} {:>6} {:>12}",
        "  with managedFields", cr_whole, 1, "-"
    );
    println!(
        "  {:<28} {:>10.0} {:>6} {:>12}",
        "  after an upgrade", cr_upgraded, 1, "-"
    );
    println!(
        "  {:<28} {:>10.0} {:>6} {:>12}",
        "  after, with managedFields", cr_upgraded_whole, 1, "-"
    );
    let mut total = cr;
    for (kind, per_object, stored) in &rows {
        let per = stored / N;
        total += per_object * per as f64;
        println!(
            "  {:<28} {:>10.0} {:>6} {:>12.0}",
            kind,
            per_object,
            per,
            per_object * per as f64
        );
    }
    println!(
        "  {:<28} {:>10} {:>6} {:>12.0}  ({:.1} KiB)",
        "total per cluster",
        "",
        "",
        total,
        total / 1024.0
    );
}
