// Package export_wit_world is where the generated bindings (../wit_exports) find the
// world's `execute` export. Not generated: the SDK (package skillhost) sets Handler.
package export_wit_world

import (
	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"skillhost.dev/sdk/bindings/imports/skillhost_skill_types"
)

// Handler runs one call; skillhost.Handle sets it.
var Handler func(call skillhost_skill_types.Invocation) witTypes.Result[skillhost_skill_types.SkillResult, skillhost_skill_types.SkillError]

// Execute is called by the generated export for each call.
func Execute(call skillhost_skill_types.Invocation) witTypes.Result[skillhost_skill_types.SkillResult, skillhost_skill_types.SkillError] {
	if Handler == nil {
		return witTypes.Err[skillhost_skill_types.SkillResult](skillhost_skill_types.MakeSkillErrorFailed(
			"the skill registered no handler: call skillhost.Handle(execute) in an init function"))
	}
	return Handler(call)
}
