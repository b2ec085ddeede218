//! The service's side of schedules (docs/rules.md#schedules): the local
//! time zone read from the system (`TZ`, `/etc/localtime`, the zone
//! database), and each scheduled rule's last fire read back from
//! `NS:schedule` at start.

use crate::namespace::Namespace;
use redis::aio::ConnectionManager;
use ruled_engine::schedule::LocalZone;
use ruled_engine::Engine;

use rulecore_io::input_file::read_zone_file;

/// The system's local time zone: `TZ` when set, else `/etc/localtime`,
/// else UTC. A zone that cannot be read is UTC, with a warning.
pub fn system_zone() -> LocalZone {
    if let Some(tz) = std::env::var_os("TZ") {
        let tz = tz.to_string_lossy().into_owned();
        return match LocalZone::named(&tz, read_zone_file) {
            Ok(zone) => zone,
            Err(error) => {
                tracing::warn!("schedules read UTC: `TZ` = {tz:?} is no zone: {error}");
                LocalZone::utc()
            }
        };
    }
    match read_zone_file("/etc/localtime") {
        Ok(bytes) => LocalZone::from_tzif("localtime", &bytes).unwrap_or_else(|error| {
            tracing::warn!("schedules read UTC: /etc/localtime is no zone file: {error}");
            LocalZone::utc()
        }),
        Err(_) => LocalZone::utc(),
    }
}

/// Each scheduled rule's last fire from `NS:schedule`: one `HMGET` of the
/// bundle's scheduled rules only, so the read is bounded by the bundle. A
/// value that is not a number is skipped with a warning.
pub async fn last_fires(
    con: &mut ConnectionManager,
    namespace: &Namespace,
    engine: &Engine,
) -> redis::RedisResult<Vec<(String, i64)>> {
    let names: Vec<&str> = engine
        .payload()
        .rules
        .iter()
        .filter(|rule| rule.schedule().is_some())
        .map(|rule| &*rule.name)
        .collect();
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let key = namespace.schedule();
    let values: Vec<Option<String>> = redis::cmd("HMGET")
        .arg(&key)
        .arg(&names)
        .query_async(con)
        .await?;
    let mut fires = Vec::new();
    for (name, value) in names.iter().zip(values) {
        let Some(value) = value else { continue };
        match value.parse::<i64>() {
            Ok(ms) => fires.push(((*name).to_string(), ms)),
            Err(_) => tracing::warn!(
                rule = %name,
                "`{key}`: the last fire {value:?} is not Unix ms; a fire missed while down \
                 is not run"
            ),
        }
    }
    Ok(fires)
}
