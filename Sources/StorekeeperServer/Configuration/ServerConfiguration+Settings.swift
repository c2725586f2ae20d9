package import StorekeeperCore

extension ServerConfiguration {
    /// The cache of customer answers (`GET /v1/customers/{id}`), dropped per customer by the writes that change
    /// them and at the customer's next expiry.
    package struct CustomerCacheSettings: Codable, Sendable, Equatable {
        /// Customers remembered; 0 turns the cache off. Default 10,000.
        package var capacity: Int
        /// The longest an answer is reused, in seconds, whatever else. Default 60.
        package var maxAgeSeconds: Double

        package init(capacity: Int = 10_000, maxAgeSeconds: Double = 60) {
            self.capacity = capacity
            self.maxAgeSeconds = maxAgeSeconds
        }

        private enum CodingKeys: String, CodingKey { case capacity, maxAgeSeconds }

        package init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            let defaults = Self()
            self.init(
                capacity: try container.decodeIfPresent(Int.self, forKey: .capacity) ?? defaults.capacity,
                maxAgeSeconds: try container.decodeIfPresent(Double.self, forKey: .maxAgeSeconds) ?? defaults.maxAgeSeconds
            )
        }
    }

    /// What the ledger keeps of what it does not need for answers.
    package struct RetentionSettings: Codable, Sendable, Equatable {
        /// Refused notification requests kept, newest first (each at most `RefusedNotification.maximumBytes`).
        /// Default 10,000: at most about 20 MB, whatever anyone sends.
        package var refusedNotifications: Int
        /// Days a notification's raw signed payload is kept after it was received; the decoded facts (type, dates,
        /// outcome, every transaction and subscription) stay. Default `nil`: kept for ever.
        package var rawPayloadDays: Double?

        package init(refusedNotifications: Int = 10_000, rawPayloadDays: Double? = nil) {
            self.refusedNotifications = refusedNotifications
            self.rawPayloadDays = rawPayloadDays
        }

        private enum CodingKeys: String, CodingKey { case refusedNotifications, rawPayloadDays }

        package init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.init(
                refusedNotifications: try container.decodeIfPresent(Int.self, forKey: .refusedNotifications) ?? Self().refusedNotifications,
                rawPayloadDays: try container.decodeIfPresent(Double.self, forKey: .rawPayloadDays)
            )
        }

        package func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(refusedNotifications, forKey: .refusedNotifications)
            try container.encode(rawPayloadDays, forKey: .rawPayloadDays)
        }
    }

    /// The notification recovery job (every app and environment with `serverAPI` credentials).
    package struct RecoverySettings: Codable, Sendable, Equatable {
        /// `false` turns the job off. Default on.
        package var enabled: Bool
        /// Seconds between runs. Default 300.
        package var intervalSeconds: Double
        /// Seconds before the watermark a run starts again. Default 3600.
        package var overlapSeconds: Double
        /// Seconds between passes over every failed delivery still in the history. Default 3600.
        package var failuresIntervalSeconds: Double

        package init(enabled: Bool = true, intervalSeconds: Double = 300, overlapSeconds: Double = 3_600, failuresIntervalSeconds: Double = 3_600) {
            self.enabled = enabled
            self.intervalSeconds = intervalSeconds
            self.overlapSeconds = overlapSeconds
            self.failuresIntervalSeconds = failuresIntervalSeconds
        }

        private enum CodingKeys: String, CodingKey { case enabled, intervalSeconds, overlapSeconds, failuresIntervalSeconds }

        package init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            let defaults = Self()
            self.init(
                enabled: try container.decodeIfPresent(Bool.self, forKey: .enabled) ?? defaults.enabled,
                intervalSeconds: try container.decodeIfPresent(Double.self, forKey: .intervalSeconds) ?? defaults.intervalSeconds,
                overlapSeconds: try container.decodeIfPresent(Double.self, forKey: .overlapSeconds) ?? defaults.overlapSeconds,
                failuresIntervalSeconds: try container.decodeIfPresent(Double.self, forKey: .failuresIntervalSeconds)
                    ?? defaults.failuresIntervalSeconds
            )
        }

        /// The job's settings.
        package var settings: NotificationRecovery.Settings {
            var settings = NotificationRecovery.Settings()
            settings.interval = .milliseconds(Int64(intervalSeconds * 1_000))
            settings.overlap = overlapSeconds
            settings.failuresInterval = failuresIntervalSeconds
            return settings
        }
    }

    /// The scheduled jobs' leases (recovery, retention; `recover` and `reconcile --all` take them too).
    package struct JobSettings: Codable, Sendable, Equatable {
        /// How long a job's lease lasts without renewal (renewed every third of it): the longest an instance that died
        /// keeps its jobs from the others, who check as often. Default 60.
        package var leaseSeconds: Double
        /// How often the consumption-request job looks for requests to decide or answer. Default 10.
        package var consumptionCheckSeconds: Double

        package init(leaseSeconds: Double = 60, consumptionCheckSeconds: Double = 10) {
            self.leaseSeconds = leaseSeconds
            self.consumptionCheckSeconds = consumptionCheckSeconds
        }

        private enum CodingKeys: String, CodingKey { case leaseSeconds, consumptionCheckSeconds }

        package init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.init(
                leaseSeconds: try container.decodeIfPresent(Double.self, forKey: .leaseSeconds) ?? Self().leaseSeconds,
                consumptionCheckSeconds: try container.decodeIfPresent(Double.self, forKey: .consumptionCheckSeconds)
                    ?? Self().consumptionCheckSeconds)
        }
    }
}
