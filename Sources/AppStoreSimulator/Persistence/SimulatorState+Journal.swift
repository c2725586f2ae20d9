extension SimulatorState {
    // MARK: - Journal

    /// Where the state was when an action began: what ``rollBack(to:)`` returns to.
    struct JournalMark {
        var scalars: Scalars
        var customers, transactions, subscriptions, notifications, consumptionInformation, massExtensions: Int
    }

    /// Starts journaling writes (actions nest: only the outermost one's end forgets the journal).
    mutating func beginJournal() -> JournalMark {
        if journalDepth == 0 { setJournaling(true) }
        journalDepth += 1
        return JournalMark(
            scalars: scalars, customers: customers.undoMark, transactions: transactions.undoMark,
            subscriptions: subscriptions.undoMark, notifications: notifications.undoMark,
            consumptionInformation: consumptionInformation.undoMark, massExtensions: massExtensions.undoMark
        )
    }

    /// The action that began at `mark` succeeded.
    mutating func endJournal() {
        journalDepth -= 1
        guard journalDepth == 0 else { return }
        customers.clearJournal()
        transactions.clearJournal()
        subscriptions.clearJournal()
        notifications.clearJournal()
        consumptionInformation.clearJournal()
        massExtensions.clearJournal()
        setJournaling(false)
    }

    /// The action that began at `mark` failed: undoes everything it wrote.
    mutating func rollBack(to mark: JournalMark) {
        scalars = mark.scalars
        customers.rollBack(to: mark.customers)
        transactions.rollBack(to: mark.transactions)
        subscriptions.rollBack(to: mark.subscriptions)
        notifications.rollBack(to: mark.notifications)
        consumptionInformation.rollBack(to: mark.consumptionInformation)
        massExtensions.rollBack(to: mark.massExtensions)
        endJournal()
    }

    private mutating func setJournaling(_ on: Bool) {
        customers.isJournaling = on
        transactions.isJournaling = on
        subscriptions.isJournaling = on
        notifications.isJournaling = on
        consumptionInformation.isJournaling = on
        massExtensions.isJournaling = on
    }

    // MARK: - Changes

    /// The records written since the last call, as they are now (a removed one as `nil`), and the scalars.
    mutating func takeChanges() -> SimulatorChanges {
        var changes = SimulatorChanges()
        changes.scalars = scalars
        for id in customers.takeChangedIds() { changes.customers.updateValue(customers[id], forKey: id) }
        for id in transactions.takeChangedIds() { changes.transactions.updateValue(transactions[id], forKey: id) }
        for id in subscriptions.takeChangedIds() { changes.subscriptions.updateValue(subscriptions[id], forKey: id) }
        for position in notifications.takeChangedPositions() where position < notifications.count {
            changes.notifications[position] = notifications[position]
        }
        for id in consumptionInformation.takeChangedIds() {
            changes.consumptionInformation.updateValue(consumptionInformation[id], forKey: id)
        }
        for id in massExtensions.takeChangedIds() { changes.massExtensions.updateValue(massExtensions[id], forKey: id) }
        return changes
    }

    /// Forgets which records were written (nothing will save them: an in-memory simulator, or a state just loaded).
    mutating func forgetChanges() {
        _ = customers.takeChangedIds()
        _ = transactions.takeChangedIds()
        _ = subscriptions.takeChangedIds()
        _ = notifications.takeChangedPositions()
        _ = consumptionInformation.takeChangedIds()
        _ = massExtensions.takeChangedIds()
    }

    /// Marks every record as changed, so the next ``takeChanges()`` holds the whole state.
    mutating func markAllChanged() {
        customers.markAllChanged()
        transactions.markAllChanged()
        subscriptions.markAllChanged()
        notifications.markAllChanged()
        consumptionInformation.markAllChanged()
        massExtensions.markAllChanged()
    }
}
