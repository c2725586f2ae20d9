/// How long clients may take and how many may be connected: what keeps a slow or idle client from holding the
/// server's connections (and file descriptors). Every field may be left out of the configuration's `http` object; the
/// defaults suit a server that Apple and apps reach directly, and are lower than a reverse proxy's own (see the
/// HTTP API article).
package struct HTTPLimits: Codable, Sendable, Equatable {
    /// Seconds an idle keep-alive connection is kept. Default 60.
    package var idleTimeout: Double
    /// Seconds from a connection opening, or from the first byte of a following request, to the end of the request
    /// head; a slower client gets 408 and is disconnected. Default 10.
    package var headerReadTimeout: Double
    /// Seconds from the request head to the end of its body; a slower body gets 408 and the connection is closed.
    /// Default 30 (a 1 MiB body at 35 KB/s).
    package var bodyReadTimeout: Double
    /// Seconds from the end of a request to the end of its response; past it the connection is closed (a client
    /// that stops reading). Default 60.
    package var responseTimeout: Double
    /// Connections served at once; more wait in the listen queue until one closes. Default 512, lowered at start
    /// to the process's open-file limit less 64 when that is smaller.
    package var maxConnections: Int

    package init(
        idleTimeout: Double = 60, headerReadTimeout: Double = 10, bodyReadTimeout: Double = 30, responseTimeout: Double = 60,
        maxConnections: Int = 512
    ) {
        self.idleTimeout = idleTimeout
        self.headerReadTimeout = headerReadTimeout
        self.bodyReadTimeout = bodyReadTimeout
        self.responseTimeout = responseTimeout
        self.maxConnections = maxConnections
    }

    private enum CodingKeys: String, CodingKey {
        case idleTimeout = "idleTimeoutSeconds", headerReadTimeout = "headerReadTimeoutSeconds"
        case bodyReadTimeout = "bodyReadTimeoutSeconds", responseTimeout = "responseTimeoutSeconds", maxConnections
    }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let defaults = HTTPLimits()
        self.init(
            idleTimeout: try container.decodeIfPresent(Double.self, forKey: .idleTimeout) ?? defaults.idleTimeout,
            headerReadTimeout: try container.decodeIfPresent(Double.self, forKey: .headerReadTimeout) ?? defaults.headerReadTimeout,
            bodyReadTimeout: try container.decodeIfPresent(Double.self, forKey: .bodyReadTimeout) ?? defaults.bodyReadTimeout,
            responseTimeout: try container.decodeIfPresent(Double.self, forKey: .responseTimeout) ?? defaults.responseTimeout,
            maxConnections: try container.decodeIfPresent(Int.self, forKey: .maxConnections) ?? defaults.maxConnections
        )
    }

    /// Refuses values that would disable a limit or make the server unusable, naming the field.
    package func validate() throws(ConfigurationError) {
        for (name, value) in [
            ("idleTimeoutSeconds", idleTimeout), ("headerReadTimeoutSeconds", headerReadTimeout),
            ("bodyReadTimeoutSeconds", bodyReadTimeout), ("responseTimeoutSeconds", responseTimeout),
        ] where !(value > 0 && value <= 3_600) {
            throw ConfigurationError(
                "http.\(name) must be more than 0 and at most 3600, not \(ConfigurationError.number(value))", setting: "http.\(name)")
        }
        guard (1...1_000_000).contains(maxConnections) else {
            throw ConfigurationError("http.maxConnections must be 1 to 1000000, not \(maxConnections)", setting: "http.maxConnections")
        }
    }
}
