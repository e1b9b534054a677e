import SyncProtocol
import Testing

/// Issue 19: the auth API may be on another host than the streaming API.
@Suite("auth endpoint")
struct AuthEndpointTests {
    @Test(arguments: [
        ("ws://localhost:8080", nil, "http://localhost:8080"),
        ("wss://sync.example.com/", nil, "https://sync.example.com"),
        ("wss://api.simperium.com", nil, "https://auth.simperium.com"),
        ("wss://API.Simperium.com:443/", nil, "https://auth.simperium.com"),
        ("wss://api.simperium.com.example.org", nil, "https://api.simperium.com.example.org"),
        ("wss://api.simperium.com", "http://localhost:9/", "http://localhost:9"),
        ("ws://localhost:1", "https://auth.example.com/base", "https://auth.example.com/base"),
    ] as [(String, String?, String)])
    func theAuthBaseIsTheGivenOneTheHostedOneOrTheServersOwn(server: String, authURL: String?, expected: String) {
        #expect(AuthEndpoint.base(streamingServer: server, authURL: authURL) == expected)
    }

    @Test func theAuthorizeURLNamesTheApp() {
        #expect(AuthEndpoint.authorizeURL(base: "https://auth.simperium.com/", appID: "my-app")
            == "https://auth.simperium.com/1/my-app/authorize/")
    }
}
