//! `outpost demo` (being written on the gateway branch).

pub fn run(_keep: bool) -> anyhow::Result<()> {
    Err(
        super::Exit::failed("the demo needs the gateway role, which this build does not have yet")
            .into(),
    )
}
