// Package arch holds tests of the module's shape rather than its behaviour: which packages
// may compile which. It has no code of its own.
package arch
