package gatewaystatus

import (
	"slices"
	"strings"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/features"
)

// SupportedFeatures are the Gateway API features Switchboard's gateway implements: the
// Core features of the GATEWAY-HTTP conformance profile and the extended ones that the
// upstream conformance suite passes against it (make conformance). The manager publishes
// them in status.supportedFeatures of its GatewayClasses.
var SupportedFeatures = []features.FeatureName{
	// Core.
	features.SupportGateway,
	features.SupportHTTPRoute,
	features.SupportReferenceGrant,
	// Extended: Gateways.
	features.SupportGatewayPort8080,
	features.SupportGatewayHTTPListenerIsolation,
	features.SupportGatewayAddressEmpty,
	features.SupportGatewayStaticAddresses,
	features.SupportGatewayHTTPSListenerDetectMisdirectedRequests,
	// Extended: HTTPRoute matching, filters and timeouts.
	features.SupportHTTPRouteQueryParamMatching,
	features.SupportHTTPRouteMethodMatching,
	features.SupportHTTPRouteDestinationPortMatching,
	features.SupportHTTPRouteParentRefPort,
	features.SupportHTTPRouteNamedRouteRule,
	features.SupportHTTPRouteResponseHeaderModification,
	features.SupportHTTPRouteBackendRequestHeaderModification,
	features.SupportHTTPRoutePortRedirect,
	features.SupportHTTPRouteSchemeRedirect,
	features.SupportHTTPRoutePathRedirect,
	features.SupportHTTPRoute303RedirectStatusCode,
	features.SupportHTTPRoute307RedirectStatusCode,
	features.SupportHTTPRoute308RedirectStatusCode,
	features.SupportHTTPRouteHostRewrite,
	features.SupportHTTPRoutePathRewrite,
	features.SupportHTTPRouteRequestTimeout,
	features.SupportHTTPRouteBackendTimeout,
	features.SupportHTTPRouteRequestMirror,
	features.SupportHTTPRouteRequestMultipleMirrors,
	features.SupportHTTPRouteRequestPercentageMirror,
	features.SupportHTTPRouteBackendProtocolH2C,
	features.SupportHTTPRouteBackendProtocolWebSocket,
}

// supportedFeatures returns SupportedFeatures as GatewayClass status lists them: sorted
// by name.
func supportedFeatures() []gatewayv1.SupportedFeature {
	out := make([]gatewayv1.SupportedFeature, len(SupportedFeatures))
	for i, f := range SupportedFeatures {
		out[i] = gatewayv1.SupportedFeature{Name: gatewayv1.FeatureName(f)}
	}
	slices.SortFunc(out, func(a, b gatewayv1.SupportedFeature) int {
		return strings.Compare(string(a.Name), string(b.Name))
	})
	return out
}
