// swift-tools-version: 6.1
import PackageDescription

/// One set of compiler settings for every target.
let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "storekeeper",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "storekeeper", targets: ["storekeeper"]),
        .library(name: "AppStoreModels", targets: ["AppStoreModels"]),
        .library(name: "AppStoreSigning", targets: ["AppStoreSigning"]),
        .library(name: "AppStoreReceipts", targets: ["AppStoreReceipts"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth.git", from: "2.5.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-collections.git", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/swiftlang/swift-docc-plugin.git", from: "1.5.0"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", from: "2.1.1"),
        .package(url: "https://github.com/apple/swift-openapi-generator.git", from: "1.14.3"),
        .package(url: "https://github.com/apple/swift-openapi-runtime.git", from: "1.13.4"),
        .package(url: "https://github.com/swift-server/swift-openapi-async-http-client.git", from: "1.5.0"),
    ],
    targets: [
        .target(
            name: "AppStoreModels",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "AppStoreSigning",
            dependencies: [
                "AppStoreModels",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            resources: [.embedInCode("Resources/AppleRootCA-G3.cer")],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "AppStoreReceipts",
            dependencies: [
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            resources: [.embedInCode("Resources/AppleIncRootCertificate.cer")],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "AppStoreServerAPI",
            dependencies: [
                "AppStoreModels",
                "AppStoreSigning",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "AppStoreSimulator",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                "AppStoreModels",
                "AppStoreReceipts",
                "AppStoreSigning",
                "StorekeeperHTTP",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "HeapModule", package: "swift-collections"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ],
            resources: [
                .embedInCode("Scenarios/subscriber-lifecycle.scenario"),
                .embedInCode("Scenarios/billing-retry.scenario"),
                .embedInCode("Scenarios/grace-period-expiry.scenario"),
                .embedInCode("Scenarios/plan-changes.scenario"),
                .embedInCode("Scenarios/offers.scenario"),
                .embedInCode("Scenarios/price-increase.scenario"),
                .embedInCode("Scenarios/refunds.scenario"),
                .embedInCode("Scenarios/family-sharing.scenario"),
                .embedInCode("Scenarios/extensions-and-removal.scenario"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "StorekeeperCore",
            dependencies: [
                "AppStoreModels", "AppStoreSigning", "AppStoreServerAPI",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "StorekeeperHTTP",
            dependencies: [.product(name: "Hummingbird", package: "hummingbird")],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "StorekeeperSQLite",
            dependencies: [
                "AppStoreModels",
                "AppStoreSigning",
                "StorekeeperCore",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "StorekeeperPostgres",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                "AppStoreModels",
                "AppStoreSigning",
                "StorekeeperCore",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "StorekeeperServer",
            dependencies: [
                "AppStoreModels",
                "AppStoreReceipts",
                "AppStoreSigning",
                "StorekeeperCore",
                "StorekeeperHTTP",
                "AppStoreServerAPI",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdAuth", package: "hummingbird-auth"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Mustache", package: "swift-mustache"),
            ],
            resources: [.embedInCode("Resources/openapi.json")]
                + [
                    "top", "bottom", "login", "overview", "search", "customer", "consumptionrows", "consumption", "extend", "answer", "message",
                    "refunds", "grant", "revoke",
                ]
                .map { .embedInCode("Resources/Dashboard/\($0).mustache") },
            swiftSettings: swiftSettings
        ),
        .target(
            name: "StorekeeperDemo",
            dependencies: [
                .product(name: "HashTreeCollections", package: "swift-collections"),
                "AppStoreModels",
                "AppStoreSigning",
                "AppStoreSimulator",
                "StorekeeperCore",
                "StorekeeperServer",
                "StorekeeperSQLite",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "StorekeeperBenchmarks",
            dependencies: [
                "AppStoreModels",
                "AppStoreSigning",
                "AppStoreReceipts",
                "AppStoreSimulator",
                "StorekeeperCore",
                "StorekeeperServer",
                "StorekeeperSQLite",
                "StorekeeperPostgres",
                "AppStoreServerAPI",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "storekeeper",
            dependencies: [
                .product(name: "Crypto", package: "swift-crypto"),
                "AppStoreModels",
                "AppStoreSigning",
                "AppStoreReceipts",
                "StorekeeperBenchmarks",
                "AppStoreSimulator",
                "AppStoreServerAPI",
                "StorekeeperCore",
                "StorekeeperServer",
                "StorekeeperSQLite",
                "StorekeeperPostgres",
                "StorekeeperDemo",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "StorekeeperTesting",
            dependencies: [
                "AppStoreModels",
                "AppStoreSigning",
                "AppStoreSimulator",
                "StorekeeperCore",
                "StorekeeperSQLite",
                "StorekeeperPostgres",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            exclude: ["Receiver"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "AppStoreReceiptsTests",
            dependencies: [
                "AppStoreReceipts",
                "StorekeeperTesting",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "AppStoreModelsTests",
            dependencies: ["AppStoreModels", "StorekeeperTesting"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "AppStoreSigningTests",
            dependencies: [
                "AppStoreModels",
                "AppStoreSigning",
                "StorekeeperTesting",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            exclude: ["Verifiers"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "AppStoreServerAPITests",
            dependencies: [
                "AppStoreModels",
                "AppStoreSigning",
                "AppStoreSimulator",
                "AppStoreServerAPI",
                "StorekeeperTesting",
                .product(name: "HashTreeCollections", package: "swift-collections"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "AppStoreSimulatorTests",
            dependencies: [
                "AppStoreModels",
                "AppStoreSigning",
                "AppStoreSimulator",
                "StorekeeperHTTP",
                "StorekeeperTesting",
                .product(name: "HashTreeCollections", package: "swift-collections"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "StorekeeperCoreTests",
            dependencies: [
                "StorekeeperSQLite",
                "StorekeeperPostgres",
                "AppStoreModels", "AppStoreSigning", "AppStoreSimulator", "StorekeeperCore", "StorekeeperTesting",
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "HashTreeCollections", package: "swift-collections"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "StorekeeperSQLiteTests",
            dependencies: [
                "AppStoreModels", "AppStoreSigning", "AppStoreSimulator", "StorekeeperCore", "StorekeeperSQLite", "StorekeeperTesting",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "HashTreeCollections", package: "swift-collections"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "StorekeeperPostgresTests",
            dependencies: [
                "StorekeeperSQLite",
                "AppStoreModels", "AppStoreSigning", "AppStoreSimulator", "StorekeeperCore", "StorekeeperPostgres", "StorekeeperTesting",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "HashTreeCollections", package: "swift-collections"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "StorekeeperServerTests",
            dependencies: [
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                "AppStoreModels",
                "AppStoreSigning",
                "AppStoreSimulator",
                "AppStoreServerAPI",
                "StorekeeperCore",
                "StorekeeperServer",
                "StorekeeperSQLite",
                "StorekeeperDemo",
                "StorekeeperTesting",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "HashTreeCollections", package: "swift-collections"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            // What the tests run beside them: the browser's script and schemathesis's configuration.
            exclude: ["Browser", "Schemathesis"],
            swiftSettings: swiftSettings
        ),
        // A client generated from the server's own /openapi.json by swift-openapi-generator's build plugin, calling the
        // routes of a running server.
        .testTarget(
            name: "OpenAPIClientTests",
            dependencies: [
                "AppStoreModels",
                "AppStoreSigning",
                "AppStoreSimulator",
                "StorekeeperCore",
                "StorekeeperServer",
                "StorekeeperSQLite",
                "StorekeeperTesting",
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                .product(name: "OpenAPIAsyncHTTPClient", package: "swift-openapi-async-http-client"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings,
            plugins: [.plugin(name: "OpenAPIGenerator", package: "swift-openapi-generator")]
        ),
        .testTarget(
            name: "StorekeeperCLITests",
            dependencies: [
                "storekeeper",
                "AppStoreModels",
                "AppStoreSigning",
                "AppStoreSimulator",
                "StorekeeperCore",
                "StorekeeperSQLite",
                "StorekeeperPostgres",
                "StorekeeperTesting",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)
