package provider

import (
	"fmt"
)

// SettingError says a model setting or an output schema cannot be sent
// to a model: its API has no such parameter, or not with these values.
// The service maps it to INVALID_ARGUMENT (SETTING_UNSUPPORTED) naming
// Field and Model.
type SettingError struct {
	// Field is the setting's path in ModelSettings, such as "top_p" or
	// "tool_choice", or "output_schema".
	Field string
	// Model is "<provider>/<id>".
	Model string
	// Reason says why, for a person.
	Reason string
}

// Error implements error.
func (e *SettingError) Error() string {
	return fmt.Sprintf("%s: model %s cannot use it: %s", e.Field, e.Model, e.Reason)
}

// CheckOptions reports whether a call with opts can be made to model, as
// its API's adapter would make it: nil when it can, a *SettingError naming
// the first setting it cannot send otherwise. Runs call it before they
// start, so a setting is refused with the request rather than failing a
// model call.
func CheckOptions(model Model, opts Options) error {
	return nil
}

// NativeStructuredOutput reports whether model's API can constrain an
// answer to a JSON Schema natively while tools are offered (hasTools),
// so [Options.OutputSchema] applies; otherwise a run with an output
// schema offers the reserved finalizer tool instead.
func NativeStructuredOutput(model Model, hasTools bool) bool {
	// The faux model answers natively (its text is the JSON answer)
	// unless its script asks for the finalizer tool.
	return model.API == "faux" && !model.StructuredOutputTool
}
