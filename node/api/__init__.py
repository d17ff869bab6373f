"""The client API (tidelog.v1.Tidelog): one servicer that only dispatches (`servicer`), a
module per API family, and what every family shares (`rules`, `authorization`, `forwarding`,
`controller_api`). See docs/architecture/rooms.md."""
