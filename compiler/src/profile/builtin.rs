//! The built-in `librescoot` profile (docs/sources.md, docs/librescoot.md):
//! the files of `profiles/librescoot/`, embedded in `rulec`. This list is
//! the one place they are named; a test fails when a file of the
//! directory is missing from it.

/// `--profile librescoot`, and what `extends` names.
pub const NAME: &str = "librescoot";

/// How diagnostics and `rulec dump` name the built-in profile's files.
pub const DIR: &str = "profiles/librescoot";

/// Every file, in byte-wise name order (the order they are read in).
pub const FILES: &[(&str, &str)] = &[
    (
        "alarm.toml",
        include_str!("../../../profiles/librescoot/alarm.toml"),
    ),
    (
        "battery.toml",
        include_str!("../../../profiles/librescoot/battery.toml"),
    ),
    (
        "channels.toml",
        include_str!("../../../profiles/librescoot/channels.toml"),
    ),
    (
        "ecu.toml",
        include_str!("../../../profiles/librescoot/ecu.toml"),
    ),
    (
        "guards.toml",
        include_str!("../../../profiles/librescoot/guards.toml"),
    ),
    (
        "lists.toml",
        include_str!("../../../profiles/librescoot/lists.toml"),
    ),
    (
        "modem.toml",
        include_str!("../../../profiles/librescoot/modem.toml"),
    ),
    (
        "power.toml",
        include_str!("../../../profiles/librescoot/power.toml"),
    ),
    (
        "profile.toml",
        include_str!("../../../profiles/librescoot/profile.toml"),
    ),
    (
        "system.toml",
        include_str!("../../../profiles/librescoot/system.toml"),
    ),
    (
        "vehicle.toml",
        include_str!("../../../profiles/librescoot/vehicle.toml"),
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_the_directory_is_embedded_in_order() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles/librescoot");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.ends_with(".toml") && !name.starts_with('.'))
            .collect();
        on_disk.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        let embedded: Vec<&str> = FILES.iter().map(|(name, _)| *name).collect();
        assert_eq!(embedded, on_disk, "profiles/librescoot/ and FILES differ");
        for (name, text) in FILES {
            let on_disk = std::fs::read_to_string(dir.join(name)).unwrap();
            assert_eq!(*text, on_disk, "{name}");
        }
    }
}
