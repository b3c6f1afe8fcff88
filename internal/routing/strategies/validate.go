package strategies

import (
	"fmt"
	"slices"
	"time"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/cache"
)

// InvalidSpecError says why the gateway cannot build a router from a RoutingPolicy spec.
type InvalidSpecError struct {
	// Reason is the Accepted condition reason: v1alpha1.RoutingPolicyReasonUnknownStrategy
	// or v1alpha1.RoutingPolicyReasonInvalidParameters.
	Reason string
	// Message says what is wrong, naming the field.
	Message string
}

// Error returns the message.
func (e *InvalidSpecError) Error() string { return e.Message }

// Validate reports whether the gateway can build a router from spec, exactly as it would
// (strategies.Registry.Router with the spec's own strategy). It returns nil or an
// *InvalidSpecError. It checks what admission validation cannot; a spec that passed the
// CRD's schema and CEL rules is rejected only for parameters the algorithms refuse, or
// for a strategy this build does not know.
func Validate(spec *v1alpha1.RoutingPolicySpec) error {
	// Routers built here only validate: they never route, so they reserve nothing.
	registry := NewRegistry(Deps{Reserver: cache.Tracker{}, StaleAfter: time.Second})
	known := registry.Strategies()
	unknown := func(field string, s v1alpha1.Strategy) error {
		if slices.Contains(known, s) {
			return nil
		}
		return &InvalidSpecError{
			Reason:  v1alpha1.RoutingPolicyReasonUnknownStrategy,
			Message: fmt.Sprintf("%s %q is not a strategy this gateway knows", field, s),
		}
	}
	if err := unknown("spec.strategy", spec.Strategy); err != nil {
		return err
	}
	if spec.Fallback != nil {
		if err := unknown("spec.fallback", *spec.Fallback); err != nil {
			return err
		}
	}
	for i, sc := range spec.Scorers {
		if err := unknown(fmt.Sprintf("spec.scorers[%d].name", i), sc.Name); err != nil {
			return err
		}
	}
	if _, err := registry.Router(spec, "", Limits{}); err != nil {
		return &InvalidSpecError{Reason: v1alpha1.RoutingPolicyReasonInvalidParameters, Message: err.Error()}
	}
	return nil
}
