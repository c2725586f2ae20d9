import ArgumentParser

@main
struct Storekeeper: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "storekeeper",
        abstract: "A self-hosted App Store purchase server, with a local App Store simulator.",
        subcommands: [
            DemoCommand.self, ServeCommand.self, ConfigCommand.self, RecoverCommand.self, ReconcileCommand.self, ImportCommand.self,
            BackupCommand.self, CopyCommand.self,
            EventsCommand.self, APIKeyCommand.self, SimulatorCommand.self, APICommand.self, VerifyCommand.self, ReceiptCommand.self,
            DecodeCommand.self,
            TokenCommand.self, SignCommand.self,
            BenchCommand.self,
        ]
    )
}
