// Package flagalias keeps a renamed command-line flag working under its
// old name for one release. pillar-controller, pillar-node and pillar-agent
// name one setting the same way (-csi-endpoint, -shutdown-grace-period,
// ...); where a binary used another name before, that name stays as an
// alias that sets the same value, says "deprecated: use -new" in the help,
// and is reported by Used so the binary can warn in its log, where an
// operator reading a pod's output sees it.
//
// It lives in the api module, the module every binary's module requires,
// and needs only the standard library.
package flagalias
