// Small static programs for the locally built images (tools/images): no
// dependencies beyond the standard library.
module github.com/lockstep/lockstep/tools/images

go 1.26.0
