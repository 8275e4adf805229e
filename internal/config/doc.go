// Package config reads the server's YAML configuration file
// (`stateindex serve --config FILE`) and resolves it, with the command
// line's flags, into one typed File.
//
// A file may name a base with `extends: other.yaml` (a path relative to the
// extending file). The base is merged under the file: mappings merge key by
// key, lists and scalars replace, and an explicit null (`key: null` or
// `key: ~`) removes the key, so its built-in default applies. Chains
// resolve (a extends b extends c); a cycle is an error naming the files.
//
// Every value keeps the file and line it came from: errors name the file,
// the key path (`cache.scopes`) and the line, and File.Explain prints each
// setting with its origin (`default`, `file.yaml:12`, `flag --shards`).
// A flag given on the command line overrides the file and is checked by the
// same function as a file's value.
//
// Caveats: the retention and expiry sections are read, checked and resolved
// per scope (Retention.For, Expiry.For), but nothing in this package applies
// them; File.HistoryPolicies hands them to whatever does.
package config
